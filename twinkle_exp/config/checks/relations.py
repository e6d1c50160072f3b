"""Relations between settings, as each schema declares them (`Related.relations`, `config.schema`).

Constructing a schema refuses what its relations name; here they run on the composed config's plain values,
outermost schema first, so that every broken relation is listed, not only the first one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from twinkle_exp.config.checks.fields import nested_schemas
from twinkle_exp.config.schema import Related


def relation_problems(schema: type, values: dict[str, Any]) -> Iterator[str]:
    """The relations of `schema` and of its nested schemas on `values` (checked field by field before)."""
    if issubclass(schema, Related):
        yield from schema.relations(values)
    for name, sub in nested_schemas(schema).items():
        if isinstance(values.get(name), dict):
            yield from relation_problems(sub, values[name])
