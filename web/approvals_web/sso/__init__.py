"""Single sign-on through OpenID Connect providers (issue 40): settings, the Authlib client, the routes."""
