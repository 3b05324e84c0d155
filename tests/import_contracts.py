"""The project's own import-linter contract type (``.importlinter`` registers it).

``store_reads_only``: the modules of ``importers`` (the client API) may import
only store modules that write nothing, and that import, within the store, only
modules that write nothing. Every write therefore goes through the engine, which
owns the rules of writes; a read may go straight to the store. A module writes
when its source holds a data-changing SQL statement, a row lock, a NOTIFY or a
call of one of the schema's PL/pgSQL functions (which all write): tests/store_writes.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules

from tests.store_writes import first_write, schema_functions, write_pattern


class StoreReadsOnlyContract(Contract):
    type_name = "store_reads_only"

    importers = fields.SetField(subfield=fields.ModuleExpressionField())
    store = fields.StringField()

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        store = self.store
        importers = {module.name for module in module_expressions_to_modules(graph, self.importers, as_packages=True)}
        spec = importlib.util.find_spec(store)
        assert spec is not None and spec.origin is not None, f"no package {store}"
        pattern = write_pattern(schema_functions(Path(spec.origin).parent))
        store_modules = graph.find_descendants(store) | {store}
        violations = []
        for imported in sorted(store_modules):
            importing = sorted(
                module
                for module in graph.find_modules_that_directly_import(imported)
                if any(module == name or module.startswith(name + ".") for name in importers)
            )
            if not importing:
                continue
            # The imported module, and every store module it reaches.
            reached = {imported} | (graph.find_upstream_modules(imported) & store_modules)
            for module in sorted(reached):
                line = first_write(_source(module), pattern)
                if line is not None:
                    violations.append({"importers": importing, "imported": imported, "writer": module, "line": line})
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for violation in check.metadata["violations"]:
            via = "" if violation["writer"] == violation["imported"] else f", which reaches {violation['writer']}"
            output.print_error(
                f"{', '.join(violation['importers'])} imports {violation['imported']}{via}, and it writes: "
                f"{violation['line']}"
            )
            output.new_line()


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, f"no module {module}"
    return Path(spec.origin).read_text()
