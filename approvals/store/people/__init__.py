"""People: accounts, API tokens, sign-in sessions and their throttle, reviewers' identities in channels.

`People` is the aggregate: the operations of `accounts`, `logins` and `reviewer_identity` over
one database. `Store.people` is one.
"""

from __future__ import annotations

from ..logins import LoginOps
from ..reviewer_identity import IdentityOps
from .identities import ProviderLoginOps
from .provisioning import ProvisioningOps
from .sign_in_states import SignInStateOps

__all__ = ("People",)


class People(ProviderLoginOps, SignInStateOps, ProvisioningOps, IdentityOps, LoginOps):
    """Who may sign in, with what, and who they are in each channel."""
