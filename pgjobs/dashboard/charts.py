"""The dashboard's charts, drawn on the server as SVG (numbers and labels the dashboard makes:
nothing user-supplied goes in): the overview's sparkline, the metrics page's bars, and the
queue page's throughput of the last hour."""

from __future__ import annotations

from dataclasses import dataclass

from pgjobs.models import MetricsBucket


def sparkline(values: list[int], width: int = 120, height: int = 24) -> str:
    """A tiny SVG of counts (numbers only: nothing user-supplied goes in)."""
    if not values:
        return ""
    top = max(max(values), 1)
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}" for i, v in enumerate(values)
    )
    return (
        f'<svg width="{width}" height="{height}" class="spark"><polyline fill="none" '
        f'stroke="#23364d" points="{points}"/></svg>'
    )


METRIC_COLOURS = {"completed": "#4c9a4c", "failed": "#d04848", "cancelled": "#8a8a8a"}


def bars(
    values: list[int],
    labels: list[str],
    colour: str = "#6c9bd2",
    width: int = 900,
    height: int = 160,
) -> str:
    """A bar chart as SVG with its axes: the largest value on the y axis, the first and last
    bucket on the x axis, each bar's value in its tooltip; "no data" when every bucket is 0."""
    left, bottom = 40, 18
    plot_w, plot_h = width - left, height - bottom - 6
    top = max(max(values, default=0), 1)
    bar = plot_w / max(len(values), 1)
    rects = "".join(
        f'<rect x="{left + i * bar:.1f}" y="{6 + plot_h - v / top * plot_h:.1f}" '
        f'width="{max(bar - 1, 1):.1f}" height="{v / top * plot_h:.1f}" fill="{colour}">'
        f"<title>{label}: {v}</title></rect>"
        for i, (v, label) in enumerate(zip(values, labels, strict=True))
    )
    axes = (
        f'<line x1="{left}" y1="6" x2="{left}" y2="{6 + plot_h}" stroke="#888"/>'
        f'<line x1="{left}" y1="{6 + plot_h}" x2="{width}" y2="{6 + plot_h}" stroke="#888"/>'
        f'<text x="{left - 4}" y="14" text-anchor="end" class="axis">{top}</text>'
        f'<text x="{left - 4}" y="{6 + plot_h}" text-anchor="end" class="axis">0</text>'
    )
    if labels:
        axes += (
            f'<text x="{left}" y="{height - 3}" class="axis">{labels[0]}</text>'
            f'<text x="{width}" y="{height - 3}" text-anchor="end" class="axis">{labels[-1]}</text>'
        )
    empty = (
        ""
        if any(values)
        else (
            f'<text x="{left + plot_w / 2}" y="{6 + plot_h / 2}" text-anchor="middle" '
            f'class="no-data">no data in this period</text>'
        )
    )
    return (
        f'<svg width="{width}" height="{height}" class="bars" font-size="11" fill="currentColor">'
        f'{axes}{rects}{empty}</svg><p class="muted">total {sum(values)}</p>'
    )


@dataclass(frozen=True, slots=True)
class Throughput:
    """A queue's last hour, a bucket a minute: finished jobs per minute (the last full minute,
    the peak), the hour's totals, and its chart."""

    completed_per_minute: int
    failed_per_minute: int
    peak_per_minute: int
    completed: int
    failed: int
    chart: str


def throughput(buckets: list[MetricsBucket], width: int = 1200, height: int = 150) -> Throughput:
    """The throughput of ``buckets`` (minutes, oldest first, the current minute last): a line
    for completed jobs and one for failed ones (died or cancelled), minutes ago on the x axis."""
    completed = [b.completed for b in buckets]
    failed = [b.dead + b.cancelled for b in buckets]
    last_full = -2 if len(buckets) > 1 else -1  # the current minute is still filling
    left, bottom = 40, 18
    plot_w, plot_h = width - left, height - bottom - 6
    top = max(max(completed, default=0), max(failed, default=0), 1)
    step = plot_w / max(len(buckets) - 1, 1)

    def line(values: list[int], colour: str, title: str) -> str:
        points = " ".join(
            f"{left + i * step:.1f},{6 + plot_h - v / top * plot_h:.1f}"
            for i, v in enumerate(values)
        )
        return (
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}">'
            f"<title>{title}</title></polyline>"
        )

    minutes = len(buckets) - 1
    axes = (
        f'<line x1="{left}" y1="6" x2="{left}" y2="{6 + plot_h}" stroke="#888"/>'
        f'<line x1="{left}" y1="{6 + plot_h}" x2="{width}" y2="{6 + plot_h}" stroke="#888"/>'
        f'<text x="{left - 4}" y="14" text-anchor="end" class="axis">{top:,}</text>'
        f'<text x="{left - 4}" y="{6 + plot_h}" text-anchor="end" class="axis">0</text>'
        f'<text x="{left}" y="{height - 3}" class="axis">{minutes} min ago</text>'
        f'<text x="{width}" y="{height - 3}" text-anchor="end" class="axis">now</text>'
    )
    chart = (
        f'<svg width="{width}" height="{height}" class="throughput" font-size="11" '
        f'fill="currentColor" viewBox="0 0 {width} {height}">{axes}'
        f"{line(completed, METRIC_COLOURS['completed'], 'completed per minute')}"
        f"{line(failed, METRIC_COLOURS['failed'], 'failed per minute')}</svg>"
    )
    return Throughput(
        completed_per_minute=completed[last_full] if completed else 0,
        failed_per_minute=failed[last_full] if failed else 0,
        peak_per_minute=max(completed, default=0),
        completed=sum(completed),
        failed=sum(failed),
        chart=chart,
    )
