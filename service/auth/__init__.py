"""Authentication: API tokens, OIDC JWTs, scopes, and the middleware that checks them."""
