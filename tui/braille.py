"""A canvas of braille cells for line plots: each terminal cell holds 2 × 4 dots, so a plot of
W × H cells has 2W × 4H points of resolution. Pure (no textual), so it can be tested on its own."""

from __future__ import annotations

# bit of the dot at (x, y) within a cell, x 0..1 left to right, y 0..3 top to bottom (Unicode order)
_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
BLANK = chr(0x2800)


class BrailleCanvas:
    """Dots addressed from the bottom left, ``x`` in ``0..2W-1``, ``y`` in ``0..4H-1``. Each cell
    takes the colour of the last thing drawn into it: a terminal cell has one colour."""

    def __init__(self, width: int, height: int) -> None:
        self.width = max(1, width)
        self.height = max(1, height)
        self._bits = [[0] * self.width for _ in range(self.height)]
        self._style: list[list[str]] = [[""] * self.width for _ in range(self.height)]

    @property
    def dots_x(self) -> int:
        return 2 * self.width

    @property
    def dots_y(self) -> int:
        return 4 * self.height

    def dot(self, x: int, y: int, style: str) -> None:
        if not (0 <= x < self.dots_x and 0 <= y < self.dots_y):
            return
        row = self.height - 1 - y // 4
        col = x // 2
        self._bits[row][col] |= _BITS[x % 2][3 - y % 4]
        self._style[row][col] = style

    def line(self, x0: int, y0: int, x1: int, y1: int, style: str) -> None:
        """Bresenham: every dot between the two ends, both included."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.dot(x0, y0, style)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def dashed(self, y: int, style: str) -> None:
        """A horizontal dashed line at dot row ``y``: two dots on, two off."""
        for x in range(self.dots_x):
            if x % 4 < 2:
                self.dot(x, y, style)

    def rows(self) -> list[list[tuple[str, str]]]:
        """Top row first; each cell as (character, style)."""
        return [
            [(chr(0x2800 + b) if b else " ", s) for b, s in zip(bits, styles, strict=True)]
            for bits, styles in zip(self._bits, self._style, strict=True)
        ]
