"""Charts as SVG markup, drawn on the server: axes with ticks, points, lines, bands and bars.

Every element carries a class (colours and strokes live in the site's stylesheet, since the
Content-Security-Policy allows no inline style) and every text is escaped."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH, HEIGHT = 640, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 16, 16, 44


def _nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About `count` round values spanning [low, high]."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [round(first + i * step, 10) for i in range(int((high - first) / step + 1e-9) + 1)]


def _label(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


@dataclass
class Chart:
    """One x-y chart. `log_x`: the x axis in decades (training sizes)."""

    x_range: tuple[float, float]
    y_range: tuple[float, float]
    x_title: str
    y_title: str
    title: str
    log_x: bool = False
    width: int = WIDTH
    height: int = HEIGHT
    parts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        low, high = self.x_range
        if self.log_x:
            low, high = math.log10(low), math.log10(high)
        pad = (high - low) * 0.04 or 0.5
        self._x = (low - pad, high + pad)
        y_low, y_high = self.y_range
        y_pad = (y_high - y_low) * 0.08 or 0.5
        self._y = (y_low - y_pad, y_high + y_pad)

    def x(self, value: float) -> float:
        if self.log_x:
            value = math.log10(value)
        low, high = self._x
        return MARGIN_LEFT + (value - low) / (high - low) * (self.width - MARGIN_LEFT
                                                              - MARGIN_RIGHT)

    def y(self, value: float) -> float:
        low, high = self._y
        return self.height - MARGIN_BOTTOM - (value - low) / (high - low) * (
            self.height - MARGIN_TOP - MARGIN_BOTTOM)

    def points(self, xy: Sequence[tuple[float, float]], css: str, tip: Sequence[str] = ()
               ) -> None:
        for i, (x, y) in enumerate(xy):
            title = f"<title>{escape(tip[i])}</title>" if i < len(tip) else ""
            self.parts.append(f'<circle class="{css}" cx="{self.x(x):.1f}" '
                              f'cy="{self.y(y):.1f}" r="3.5">{title}</circle>')

    def line(self, xy: Sequence[tuple[float, float]], css: str) -> None:
        if len(xy) >= 2:
            path = " ".join(f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in xy)
            self.parts.append(f'<polyline class="{css}" points="{path}"/>')

    def interval(self, x: float, low: float, high: float, css: str, tip: str = "") -> None:
        title = f"<title>{escape(tip)}</title>" if tip else ""
        self.parts.append(f'<line class="{css}" x1="{self.x(x):.1f}" x2="{self.x(x):.1f}" '
                          f'y1="{self.y(low):.1f}" y2="{self.y(high):.1f}">{title}</line>')

    def band(self, xs: Sequence[float], lows: Sequence[float], highs: Sequence[float],
             css: str) -> None:
        if len(xs) >= 2:
            edge = [(x, h) for x, h in zip(xs, highs, strict=True)] + \
                [(x, lo) for x, lo in reversed(list(zip(xs, lows, strict=True)))]
            path = " ".join(f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in edge)
            self.parts.append(f'<polygon class="{css}" points="{path}"/>')

    def x_span(self, low: float, high: float, css: str, tip: str) -> None:
        """A shaded stretch of the x axis (e.g. weights past saturation)."""
        left, right = self.x(low), self.x(high)
        self.parts.append(f'<rect class="{css}" x="{left:.1f}" y="{MARGIN_TOP}" '
                          f'width="{max(right - left, 2):.1f}" '
                          f'height="{self.height - MARGIN_TOP - MARGIN_BOTTOM}">'
                          f"<title>{escape(tip)}</title></rect>")

    def hline(self, y: float, css: str, text: str) -> None:
        self.parts.append(f'<line class="{css}" x1="{MARGIN_LEFT}" '
                          f'x2="{self.width - MARGIN_RIGHT}" y1="{self.y(y):.1f}" '
                          f'y2="{self.y(y):.1f}"><title>{escape(text)}</title></line>')
        self.parts.append(f'<text class="note" x="{self.width - MARGIN_RIGHT - 4}" '
                          f'y="{self.y(y) - 4:.1f}" text-anchor="end">{escape(text)}</text>')

    def _axes(self) -> list[str]:
        bottom, right = self.height - MARGIN_BOTTOM, self.width - MARGIN_RIGHT
        out = [f'<line class="axis" x1="{MARGIN_LEFT}" x2="{right}" y1="{bottom}" '
               f'y2="{bottom}"/>',
               f'<line class="axis" x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT}" y1="{MARGIN_TOP}" '
               f'y2="{bottom}"/>']
        x_low, x_high = self.x_range
        if self.log_x:
            ticks = [10.0 ** d for d in range(math.ceil(math.log10(x_low)),
                                              math.floor(math.log10(x_high)) + 1)]
        else:
            ticks = _nice_ticks(x_low, x_high)
        for t in ticks:
            out.append(f'<text class="tick" x="{self.x(t):.1f}" y="{bottom + 16}" '
                       f'text-anchor="middle">{_label(t)}</text>')
        for t in _nice_ticks(*self.y_range, count=5):
            out.append(f'<text class="tick" x="{MARGIN_LEFT - 6}" y="{self.y(t) + 4:.1f}" '
                       f'text-anchor="end">{_label(t)}</text>')
        out.append(f'<text class="axis-title" x="{(MARGIN_LEFT + right) / 2:.0f}" '
                   f'y="{self.height - 6}" text-anchor="middle">{escape(self.x_title)}</text>')
        out.append(f'<text class="axis-title" x="14" y="{(MARGIN_TOP + bottom) / 2:.0f}" '
                   f'text-anchor="middle" transform="rotate(-90 14 '
                   f'{(MARGIN_TOP + bottom) / 2:.0f})">{escape(self.y_title)}</text>')
        return out

    def render(self) -> str:
        body = "".join(self._axes() + self.parts)
        return (f'<svg class="chart" role="img" viewBox="0 0 {self.width} {self.height}" '
                f'xmlns="http://www.w3.org/2000/svg"><title>{escape(self.title)}</title>'
                f"{body}</svg>")


def _shortened(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def bar_chart(rows: Sequence[tuple[str, float]], title: str, width: int = WIDTH) -> str:
    """Horizontal bars of shares in [0, 1], largest first, one row per label."""
    row_height, label_width = 22, 300
    height = row_height * len(rows) + 8
    bars = []
    for i, (label, share) in enumerate(rows):
        y = 4 + i * row_height
        length = max(share, 0.0) * (width - label_width - 60)
        bars.append(f'<text class="tick" x="{label_width - 6}" y="{y + 15}" '
                    f'text-anchor="end">{escape(_shortened(label, 46))}</text>'
                    f'<rect class="bar" x="{label_width}" y="{y + 3}" width="{length:.1f}" '
                    f'height="{row_height - 6}"><title>{escape(label)}: {share:.1%}</title></rect>'
                    f'<text class="tick" x="{label_width + length + 6:.1f}" y="{y + 15}">'
                    f"{share:.1%}</text>")
    return (f'<svg class="chart bars" role="img" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
            f'{"".join(bars)}</svg>')


def weight_band(weight: float, interval: Sequence[float], law: Sequence[float] | None,
                equivalent: Sequence[float] | None, scale: tuple[float, float] = (1.0, 15.0),
                width: int = WIDTH) -> str:
    """The answer on the weight scale: the equivalent weights as a light band, the plausible
    range (never narrower than them) as a middle one, the law's own 80% interval as a dark
    one, the recommended weight as a mark."""
    low, high = min(scale[0], *interval), max(scale[1], *interval)

    def x(value: float) -> float:
        return 20 + (value - low) / (high - low or 1) * (width - 40)

    def span(css: str, edges: Sequence[float], top: int, tall: int, tip: str) -> str:
        return (f'<rect class="{css}" x="{x(edges[0]):.1f}" y="{top}" '
                f'width="{max(x(edges[1]) - x(edges[0]), 2):.1f}" height="{tall}">'
                f"<title>{escape(tip)}: {edges[0]:g} to {edges[1]:g}</title></rect>")

    parts = [f'<line class="axis" x1="20" x2="{width - 20}" y1="40" y2="40"/>']
    for tick in _nice_ticks(low, high, count=7):
        parts.append(f'<text class="tick" x="{x(tick):.1f}" y="58" text-anchor="middle">'
                     f"{_label(tick)}</text>")
    if equivalent:
        parts.append(span("equivalent", equivalent, 10, 28, "weights not told apart from "
                          "the best"))
    parts.append(span("interval", interval, 16, 16, "plausible range of the best weight"))
    if law:
        parts.append(span("law-interval", law, 20, 8, "the law's own 80% interval"))
    parts.append(f'<line class="answer-mark" x1="{x(weight):.1f}" x2="{x(weight):.1f}" '
                 f'y1="6" y2="40"><title>recommended: {weight:g}</title></line>')
    return (f'<svg class="chart weight-band" role="img" viewBox="0 0 {width} 64" '
            f'xmlns="http://www.w3.org/2000/svg"><title>the recommended weight {weight:g}, '
            f"its plausible range, the law's 80% interval and the equivalent weights</title>"
            f"{''.join(parts)}</svg>")
