"""Every table the CLI prints, the way docker prints its own.

* stdout not a terminal (a pipe, a file, ``$(...)``): one line per row, columns padded
  to their widest cell, nothing wrapped or cut, no colour, so ``instinct ps | grep NAME``
  finds the row and ``awk`` can split it;
* on a terminal: the columns that do not fit go, lowest value first (``drop``: a higher
  number goes earlier; 0 never goes); key columns (names, ids, model ids) are never cut,
  the other cells fold; when even the key columns are wider than the terminal,
  the rows are printed whole, as through a pipe (the terminal wraps them, nothing is cut).

``TTY_COMPATIBLE=1`` (rich's switch) makes a pipe count as a terminal, ``COLUMNS`` sets
its width: that is how the tests look at the terminal view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, Group, RenderableType
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

GAP = "   "  # between columns in the plain view (docker's three spaces)
PROSE = 24  # the width a prose column is given when the others are fitted
FOLDED = 10  # the narrowest a non-key column is folded to before the rows go whole


@dataclass(frozen=True)
class Column:
    """One column: its header; ``key``: never cut (a name, id or model id); ``drop``: 0
    stays, else the order in which a narrow terminal lets it go (higher first);
    ``right``: numbers align right; ``prose``: a sentence that folds on a terminal
    (counted at ``PROSE`` columns when deciding what else fits)."""

    header: str
    key: bool = False
    drop: int = 0
    right: bool = False
    prose: bool = False


class Rows:
    """A table to print: ``add`` rows of cells (rich markup allowed), then ``print``."""

    def __init__(
        self,
        columns: Sequence[Column | str],
        title: str | None = None,
        *,
        header: bool = True,
    ) -> None:
        self.columns = [c if isinstance(c, Column) else Column(c) for c in columns]
        self.title = title
        self.header = header
        self.rows: list[list[str]] = []

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(["" if c is None else str(c) for c in cells])

    def __len__(self) -> int:
        return len(self.rows)

    def print(self, con: Console) -> None:
        from rich.table import Table

        view = self.renderable(con)
        con.print(view, soft_wrap=not isinstance(view, Table), highlight=False)

    def renderable(self, con: Console) -> RenderableType:
        """The view for ``con``: a folded rich table on a terminal where its key columns
        fit, else whole lines (print them with ``soft_wrap=True``: never wrapped or cut)."""
        if not con.is_terminal:
            return self._plain(range(len(self.columns)))
        keep = self._fitting(con)
        if _measure(con, self._rich(keep, squeeze=FOLDED)).minimum > con.width:
            return self._plain(keep)  # even the key columns are too wide: whole lines
        return self._rich(keep)

    # ------------------------------------------------------------------ the views

    def _texts(self) -> list[list[Text]]:
        from rich.text import Text

        return [[Text.from_markup(" ".join(cell.split("\n"))) for cell in row] for row in self.rows]

    def _plain(self, keep: Sequence[int]) -> Group:
        from rich.console import Group
        from rich.text import Text

        rows = self._texts()
        heads = [Text(self.columns[i].header, style="bold") for i in keep]
        body = [[row[i] for i in keep] for row in rows]
        every = [heads, *body] if self.header else body
        widths = [max(r[j].cell_len for r in every) for j in range(len(keep))] if every else []
        lines = [Text(self.title, style="italic")] if self.title else []
        for line in every:
            out = Text()
            for j, cell in enumerate(line):
                pad = " " * (widths[j] - cell.cell_len)
                right = self.columns[keep[j]].right
                out.append_text(Text.assemble(pad, cell) if right else Text.assemble(cell, pad))
                if j < len(line) - 1:
                    out.append(GAP)
            out.rstrip()
            lines.append(out)
        return Group(*lines)

    def _rich(self, keep: Sequence[int], fitting: bool = False, squeeze: int = 0) -> Table:
        """The rich table of the ``keep`` columns; ``fitting``: prose counted at ``PROSE``
        columns; ``squeeze``: every other non-key column at most that wide (how narrow
        rich may fold it: a long path in a sentence does not make the table too wide)."""
        from rich.table import Table

        rows = self._texts()
        table = Table(
            title=self.title,
            title_justify="left",
            box=None,
            pad_edge=False,
            header_style="bold",
            show_header=self.header,
            highlight=False,
        )
        for i in keep:
            c = self.columns[i]
            widest = max([len(c.header), *(row[i].cell_len for row in rows)])
            table.add_column(
                c.header,
                no_wrap=c.key,
                min_width=widest if c.key else None,
                max_width=squeeze if squeeze and not c.key else _prose(fitting, c),
                overflow="fold",
                justify="right" if c.right else "left",
            )
        for row in rows:
            table.add_row(*(row[i] for i in keep))
        return table

    def _fitting(self, con: Console) -> list[int]:
        """The columns kept on a terminal ``con.width`` wide: the droppable ones go,
        highest ``drop`` first (the rightmost of a tie), until the table fits unfolded."""
        keep = list(range(len(self.columns)))
        order = sorted(
            (i for i, c in enumerate(self.columns) if c.drop),
            key=lambda i: (-self.columns[i].drop, -i),
        )
        for i in order:
            if _measure(con, self._rich(keep, fitting=True)).maximum <= con.width:
                break
            keep.remove(i)
        return keep


def _measure(con: Console, table: Table) -> Measurement:
    """The table's width bounds, unclamped by the console's width (rich caps both)."""
    from rich.measure import Measurement

    return Measurement.get(con, con.options.update_width(10**6), table)


def _prose(fitting: bool, column: Column) -> int | None:
    return PROSE if fitting and column.prose else None
