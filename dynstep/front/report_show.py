"""Reports in the terminal (rich): `dynstep report`'s short summary, and the graph breaks and
recompiles `dynstep run` prints at the end (or one by one with ``--explain``).

    show_report(report, wrote=[("HTML", "run.report.html")])
    show_compile_events(events)          # a table, deduplicated, on stderr
    explain(event)                       # one event as it happens, on stderr
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..recording.facts import CompileEvent, dedupe
from ..report.model import RunReport
from ..report.text import event_line, function_name, nonfinite_line, ranks_line, summary_rows
from .tables import plain, table_console

_SHOWN_IN_TERMINAL = ("recording", "hits", "calls (steps)", "probes", "graphs", "devices", "compile events", "kernels")
_MAX_EVENTS = 12


def _console(console: Console | None, *, stderr: bool = False) -> Console:
    if console is not None:
        return console
    return table_console(stderr=stderr, minimum=120)


def show_report(report: RunReport, *, wrote: Sequence[tuple[str, str]] = (), console: Console | None = None) -> None:
    out = _console(console)
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim")
    table.add_column(overflow="fold")
    for key, value in summary_rows(report):
        if key in _SHOWN_IN_TERMINAL:
            table.add_row(key, escape(value))
    out.print("[bold]dynstep report[/]")
    out.print(table)
    for problem in report.problems:
        out.print(f"[yellow]problem:[/] {escape(problem)}", highlight=False)
    if report.leadup is not None:
        t, steps = report.leadup.trigger, report.leadup.steps
        out.print(f"[bold]flight recorder:[/] {t.kind} at step {t.step}", end="")
        out.print((f", {t.where}" if t.where else "") + (f": {t.reason}" if t.reason else "")
                  + f" (steps {steps[0]}..{steps[-1]} in the dump)", markup=False, highlight=False, soft_wrap=True)
    if report.first_nonfinite is not None:
        out.print("[bold red]first NaN/Inf:[/] ", end="")
        out.print(nonfinite_line(report.first_nonfinite), markup=False, highlight=False)
    elif report.hits:
        out.print(f"[green]no NaN or Inf in {len(report.hits)} hit(s)[/]")
    if report.rank is not None:
        out.print(ranks_line(report), markup=False, highlight=False)
    if report.events:
        print_events(out, report.events[:_MAX_EVENTS], title="graph breaks and recompiles")
        if len(report.events) > _MAX_EVENTS:
            out.print(f"[dim]... and {len(report.events) - _MAX_EVENTS} more (in the HTML page)[/]")
    for what, path in wrote:
        out.print(f"[dim]{what}:[/] {escape(path)}", highlight=False)


def events_table(events: Sequence[CompileEvent], *, title: str) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold", show_lines=False)
    for name, justify in (("kind", "left"), ("×", "right"), ("where", "left"), ("line", "left"), ("reason", "left")):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for e in events:
        color = "red" if e.kind == "graph_break" else "yellow"
        where = e.where + (f" in {function_name(e.function)}" if e.function else "")
        reason = escape(e.reason) + "".join(f"\n[dim]{escape(line)}[/]" for line in explanation_lines(e))
        table.add_row(f"[{color}]{e.kind.replace('_', ' ')}[/]", str(e.count), escape(where), escape(e.source_text),
                      reason)
    return table


def explanation_lines(e: CompileEvent) -> list[str]:
    """What Dynamo says to do about an event: its hints, and the graph-break id with its page."""
    lines = [f"hint: {h}" for h in e.hints]
    if e.gb_id:
        lines.append(f"{e.gb_id}: {e.doc_url}" if e.doc_url else e.gb_id)
    return lines


def print_events(out: Console, events: Sequence[CompileEvent], *, title: str) -> None:
    """A table in a terminal; elsewhere (a CI log, a pipe) one block per event, nothing folded mid-word."""
    if not plain(out):
        out.print(events_table(events, title=title))
        return
    out.print(title, markup=False, highlight=False)
    for e in events:
        out.print(event_line(e), markup=False, highlight=False)
        for line in ([e.source_text] if e.source_text else []) + explanation_lines(e):
            out.print("    " + line, markup=False, highlight=False)


def show_compile_events(events: Sequence[CompileEvent], console: Console | None = None) -> None:
    """`dynstep run`'s closing summary: each graph break and recompile once, with its count."""
    found = dedupe([e for e in events if e.kind != "compile"])
    if not found:
        return
    out = _console(console, stderr=True)
    breaks = sum(e.count for e in found if e.kind == "graph_break")
    recompiles = sum(e.count for e in found if e.kind == "recompile")
    print_events(out, found, title=f"dynstep: {breaks} graph break(s), {recompiles} recompile(s)")


def explain(event: CompileEvent, console: Console | None = None) -> None:
    """`dynstep run --explain`: one graph break or recompile as it happens, with Dynamo's hints."""
    if event.kind == "compile":
        return
    out = _console(console, stderr=True)
    color = "red" if event.kind == "graph_break" else "yellow"
    out.print(f"[bold {color}]dynstep:[/] ", end="")
    out.print(event_line(event) + (f"\n    {event.source_text}" if event.source_text else ""), markup=False,
              highlight=False)
    if event.detail:
        out.print("    " + event.detail.splitlines()[0], markup=False, highlight=False, style="dim")
    for line in explanation_lines(event):
        out.print("    " + line, markup=False, highlight=False, style="dim")
