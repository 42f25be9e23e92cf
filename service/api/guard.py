"""Parsing and validation of GraphQL documents in worker threads, under the ``[limits]``.

Both are CPU work proportional to the document (validation's overlapping-fields rule worse than
that): on the event loop, one large document stalls every other client, ``/healthz`` included.
:class:`LimitedParsing` moves them to the threadpool and refuses, each with its own code:

* ``TOO_MANY_TOKENS``: more lexical tokens (or comments) than ``max_tokens``; the parser stops there.
* ``QUERY_TOO_DEEP``: fields nested deeper than ``max_depth`` (or too deep to parse at all, or
  introspection nested past graphql-core's own limit).
* ``TOO_MANY_ALIASES``: more aliased fields than ``max_aliases`` (1,000 aliases of one costly
  field would run it 1,000 times).

The limit rules run before the full validation, so a refused document never pays for it, and
nothing is executed (no SQL) for a document that fails either.

A document that parsed and passed validation is kept (:class:`ValidDocuments`, a small LRU) under
everything that decided it: the query text, the schema, the validation rules and the limits. The
same query again (a client paging through an answer sends one text many times) is then neither
parsed nor validated, and skips both trips to the threadpool: ~3 ms of CPU a request, more under
load. graphql-core never changes a document it executes; refusals are not kept (each is worked
out again, its error included).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable
from functools import cache

from anyio import to_thread
from graphql import DocumentNode, GraphQLError, GraphQLSchema, parse, validate
from graphql.validation import ASTValidationRule
from strawberry.extensions import SchemaExtension
from strawberry.extensions.max_aliases import create_validator as alias_rule
from strawberry.extensions.query_depth_limiter import create_validator as depth_rule
from strawberry.schema.schema import validate_document

from service.api.context import ApiContext
from service.limits import Limits

QUERY_TOO_DEEP = "QUERY_TOO_DEEP"
TOO_MANY_ALIASES = "TOO_MANY_ALIASES"
TOO_MANY_TOKENS = "TOO_MANY_TOKENS"
SYNTAX = "GRAPHQL_VALIDATION_FAILED"  # the code syntax errors have always had
INTROSPECTION_TOO_DEEP = "Maximum introspection depth exceeded"


def _with_code(error: GraphQLError, code: str) -> GraphQLError:
    return GraphQLError(
        error.message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        extensions={**(error.extensions or {}), "code": code},
    )


def parse_limited(query: str, limits: Limits) -> DocumentNode:
    """``query`` parsed, or a :class:`GraphQLError` with its code (syntax, tokens, depth)."""
    try:
        return parse(query, max_lexical_tokens=limits.max_tokens, max_comments=limits.max_tokens)
    except GraphQLError as error:
        if "Parsing aborted" in error.message and "nested too deeply" in error.message:
            raise _with_code(error, QUERY_TOO_DEEP) from None
        if "Parsing aborted" in error.message:
            raise _with_code(error, TOO_MANY_TOKENS) from None
        raise _with_code(error, SYNTAX) from None


@cache
def _limit_rules(max_depth: int, max_aliases: int) -> tuple[tuple[type[ASTValidationRule], str], ...]:
    return ((depth_rule(max_depth, None), QUERY_TOO_DEEP), (alias_rule(max_aliases), TOO_MANY_ALIASES))


def validate_limited(
    schema: GraphQLSchema,
    document: DocumentNode,
    rules: tuple[type[ASTValidationRule], ...],
    limits: Limits,
) -> list[GraphQLError]:
    """The limits' errors (coded) if the document breaks one, else the schema's validation errors."""
    for rule, code in _limit_rules(limits.max_depth, limits.max_aliases):
        errors = validate(schema, document, [rule])
        if errors:
            return [_with_code(e, code) for e in errors]
    # graphql-core's own MaxIntrospectionDepthRule (introspection fields are not counted above).
    return [
        _with_code(e, QUERY_TOO_DEEP) if e.message == INTROSPECTION_TOO_DEEP else e
        for e in validate_document(schema, document, rules)
    ]


def _limits_of(context: object) -> Limits:
    return context.settings.limits if isinstance(context, ApiContext) else Limits()


class ValidDocuments:
    """The last ``size`` documents that parsed and validated clean, least recently used out;
    queries longer than ``max_chars`` are not kept (their documents could be large)."""

    def __init__(self, size: int = 256, max_chars: int = 16_384) -> None:
        self.size, self.max_chars = size, max_chars
        self._documents: OrderedDict[Hashable, DocumentNode] = OrderedDict()
        self._lock = threading.Lock()  # tests run schemas from several threads' event loops

    def key(
        self, query: str, schema: GraphQLSchema, rules: tuple[type[ASTValidationRule], ...], limits: Limits
    ) -> Hashable | None:
        """What decides the parse and the validation of ``query`` (None: not kept)."""
        if len(query) > self.max_chars:
            return None
        return (query, schema, rules, limits.max_tokens, limits.max_depth, limits.max_aliases)

    def get(self, key: Hashable) -> DocumentNode | None:
        with self._lock:
            document = self._documents.get(key)
            if document is not None:
                self._documents.move_to_end(key)
            return document

    def put(self, key: Hashable, document: DocumentNode) -> None:
        with self._lock:
            self._documents[key] = document
            self._documents.move_to_end(key)
            while len(self._documents) > self.size:
                self._documents.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._documents.clear()


#: This process's documents known valid (a schema is in the key as itself, compared by identity).
VALID_DOCUMENTS = ValidDocuments()


class LimitedParsing(SchemaExtension):
    """Parses and validates in a worker thread with the request's limits (see the module doc);
    a document known valid (:data:`VALID_DOCUMENTS`) is taken as it is."""

    _known_valid = False
    _key: Hashable | None = None

    async def on_parse(self) -> AsyncIterator[None]:
        ctx = self.execution_context
        if ctx.graphql_document is None and ctx.query:
            limits = _limits_of(ctx.context)
            self._key = VALID_DOCUMENTS.key(ctx.query, ctx.schema._schema, ctx.validation_rules, limits)
            known = None if self._key is None else VALID_DOCUMENTS.get(self._key)
            if known is not None:
                ctx.graphql_document, self._known_valid = known, True
            else:
                # A refusal is raised as a coded GraphQLError: strawberry answers it as a
                # pre-execution error, nothing is executed.
                ctx.graphql_document = await to_thread.run_sync(parse_limited, ctx.query, limits)
        yield

    async def on_validate(self) -> AsyncIterator[None]:
        ctx = self.execution_context
        if ctx.pre_execution_errors is None and ctx.graphql_document is not None:
            # Setting pre_execution_errors (even to []) tells strawberry validation has run.
            if self._known_valid:
                ctx.pre_execution_errors = []
            else:
                errors = await to_thread.run_sync(
                    validate_limited, ctx.schema._schema, ctx.graphql_document, ctx.validation_rules,
                    _limits_of(ctx.context),
                )  # fmt: skip
                ctx.pre_execution_errors = errors
                if not errors and self._key is not None:
                    VALID_DOCUMENTS.put(self._key, ctx.graphql_document)
        yield
