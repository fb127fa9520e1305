"""What each database does differently with the same statements.

SQLite runs a transaction's statements straight on the `sqlite3` cursor, on the event loop
(`sqlite_direct`, `sqlite_writes`); PostgreSQL sends them in a psycopg pipeline on connections
kept in autocommit mode (`postgres`, `postgres_connections`, `postgres_decisions`). The rules
themselves, the statements, live one level up and are written once.
"""
