"""``chaoslight sites`` and ``chaoslight faults``: the catalogue, one line each."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from chaoslight._schedule._describe import fault_descriptions, site_descriptions


def _print_table(title: str, rows: dict[str, str]) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:
        for name, text in rows.items():
            console.print(f"{name:<34} {text}", soft_wrap=True)
        return 0
    table = Table(title=title, show_lines=False)
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("description")
    for name, text in rows.items():
        table.add_row(name, text)
    console.print(table)
    return 0


def print_sites() -> int:
    return _print_table("chaoslight sites", site_descriptions())


def print_faults() -> int:
    return _print_table("chaoslight faults", fault_descriptions())
