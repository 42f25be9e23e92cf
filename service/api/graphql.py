"""The schema and the ASGI GraphQL app (GraphiQL on ``GET /graphql``).

Resolvers are async and run their database work in Starlette's threadpool (the engine is sync):
see :meth:`service.api.context.ApiContext.read`.
"""

from __future__ import annotations

from typing import Any

import strawberry
from sqlalchemy import Engine
from strawberry.asgi import GraphQL

from service.api.context import ApiContext, ApiSettings
from service.api.cost import CostQuery
from service.api.devices import DeviceQuery
from service.api.errors import ErrorCodes, LedgerSchema
from service.api.idle import IdleQuery
from service.api.reconciliation import ReconciliationQuery
from service.api.usage import UsageQuery


@strawberry.type(
    description="GPU Ledger: what GPUs cost and how much work they did, from the hourly GPU-hour ledger."
)
class Query(UsageQuery, CostQuery, IdleQuery, DeviceQuery, ReconciliationQuery):
    pass


schema = LedgerSchema(query=Query, extensions=[ErrorCodes])


class LedgerGraphQL(GraphQL[ApiContext, None]):
    """strawberry's ASGI view with our context: the engine and the API settings."""

    def __init__(self, engine: Engine, settings: ApiSettings) -> None:
        super().__init__(schema, graphql_ide="graphiql")
        self.engine, self.settings = engine, settings

    async def get_context(self, request: Any, response: Any) -> ApiContext:
        return ApiContext(self.engine, self.settings, request)


def build_graphql_app(engine: Engine, api_settings: ApiSettings | None = None) -> GraphQL[ApiContext, None]:
    """The GraphQL ASGI app on ``engine`` (mounted at ``/graphql`` by :func:`service.app.create_app`)."""
    return LedgerGraphQL(engine, api_settings or ApiSettings())
