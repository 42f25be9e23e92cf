"""The GraphQL API (DESIGN §6): thin strawberry views over :mod:`service.analytics`."""
