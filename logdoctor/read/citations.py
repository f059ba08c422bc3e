"""Where a position is in the files as given: position → (node, line as given).

Events are ordered by `Event.line`, a position in the stream as read. Two inputs make that position
differ from what a user must be shown:
- a newest-first export read oldest-first: ingest numbers lines in reading order and sets
  `Line.origin` to the line in the file as given (parse notes it here);
- several files (or one file split into its pods) merged into one launch: positions count in merged
  order, and a citation is the node plus the line in that node's file (launch.py fills the map).

The map is two arrays indexed by position - 6 bytes a line, and nothing at all for a plain single log
(the identity). It is applied once, when diagnosis is over (after ranking, nothing orders by position
any more): see `run.model.cite_run` and `diagnosis.ranking.cite_report`.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from logdoctor.events import Event


class Citations:
    """position → (node, line as given); the identity until something is noted."""

    __slots__ = ("_line", "_node", "nodes")

    def __init__(self) -> None:
        self.nodes: list[str] = []            # node index → label (several nodes only)
        self._node: array[int] | None = None  # position - 1 → node index
        self._line: array[int] | None = None  # position - 1 → line as given (None: the identity)

    @property
    def active(self) -> bool:
        return self._line is not None or self._node is not None

    @property
    def several_nodes(self) -> bool:
        return len(self.nodes) > 1

    def note_origin(self, number: int, origin: int) -> None:
        """Line `number` of the stream is line `origin` of the file as given."""
        a = self._line
        if a is None:
            a = self._line = array("I")
        n = len(a)
        if number > n:
            a.extend(range(n + 1, number + 1))  # lines never noted are where they are
        a[number - 1] = origin

    def line(self, pos: int) -> int:
        a = self._line
        return a[pos - 1] if a is not None and 0 < pos <= len(a) else pos

    def node(self, pos: int) -> str | None:
        a = self._node
        if a is None or not 0 < pos <= len(a):
            return None
        return self.nodes[a[pos - 1]]

    def cite(self, pos: int | None) -> tuple[str | None, int | None]:
        if pos is None:
            return None, None
        return self.node(pos), self.line(pos)

    def event(self, ev: Event) -> Event:
        """`ev` with its lines as given (in place): for output of events one by one (`parse`)."""
        if self._line is None:
            return ev
        ev.line = self.line(ev.line)
        if ev.end_line is not None:
            ev.end_line = self.line(ev.end_line)
        f = ev.fields
        if isinstance(f.get("exception_line"), int):
            f["exception_line"] = self.line(f["exception_line"])
        for link in f.get("chain") or ():
            if isinstance(link, dict) and isinstance(link.get("line"), int):
                link["line"] = self.line(link["line"])
        return ev


class MergedPositions:
    """Gives the events of several streams (one per node) positions in merged order.

    Each node's lines get a run of positions when the first event that needs them arrives (the lines
    between that node's previous event and this one included), so every line of every stream has one
    position and positions grow along the merged order. `streams[k]` is node k's own map (its lines as
    read → as given), filled by its parser while it reads: by the time an event arrives, its lines are in.
    """

    def __init__(self, labels: list[str], streams: list[Citations]) -> None:
        self.citations = Citations()
        self.citations.nodes = list(labels)
        self.citations._node = array("H")
        self.citations._line = array("I")
        self._streams = streams
        self._done = [0] * len(labels)                          # stream lines placed so far, per node
        self._chunks: list[list[tuple[int, int]]] = [[] for _ in labels]  # (first stream line, its position)
        self._starts: list[list[int]] = [[] for _ in labels]

    def _place(self, k: int, upto: int) -> None:
        start = self._done[k] + 1
        if upto < start:
            return
        c = self.citations
        assert c._node is not None and c._line is not None
        pos0 = len(c._line) + 1
        self._chunks[k].append((start, pos0))
        self._starts[k].append(start)
        n = upto - start + 1
        c._node.extend(array("H", [k]) * n)
        own = self._streams[k]
        if own._line is None:
            c._line.extend(range(start, upto + 1))
        else:
            c._line.extend(own.line(x) for x in range(start, upto + 1))
        self._done[k] = upto

    def _pos(self, k: int, x: int) -> int:
        chunks = self._chunks[k]
        s, p = chunks[-1]
        if x >= s:
            return p + x - s
        i = bisect_right(self._starts[k], x) - 1
        s, p = chunks[max(i, 0)]
        return p + x - s

    def place(self, k: int, ev: Event) -> Event:
        """`ev` (of node k, lines as its stream numbers them) with merged positions, in place."""
        f = ev.fields
        exc = f.get("exception_line")
        chain = f.get("chain")
        last = max(ev.line, ev.end_line or 0, exc if isinstance(exc, int) else 0)
        self._place(k, last)
        pos = self._pos
        ev.line = pos(k, ev.line)
        if ev.end_line is not None:
            ev.end_line = pos(k, ev.end_line)
        if isinstance(exc, int):
            f["exception_line"] = pos(k, exc)
        if chain:
            for link in chain:
                if isinstance(link, dict) and isinstance(link.get("line"), int) and link["line"] <= last:
                    link["line"] = pos(k, link["line"])
        ev.node = self.citations.nodes[k]
        return ev


def where(node: str | None, line: int | None) -> str:
    """How a citation reads in text: `node1.log:12`, or `line 12` in a single log."""
    return f"{node}:{line}" if node else f"line {line}"


__all__ = ["Citations", "MergedPositions", "where"]
