"""The GraphQL API (docs/design.md §6): thin strawberry views over :mod:`service.analytics`."""
