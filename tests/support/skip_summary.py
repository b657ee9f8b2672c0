"""The lines the test summary adds about skipped tests: how many, how many of them are cases of a
parametrised matrix, and every reason with its count (most first). pytest's own `-rs` lists each skip by
file and line; a run skips over a thousand cases, nearly all of a matrix (an attention strategy that
cannot run a method or layout, a CUDA-only case), so the counted reasons are what says whether a skip
is expected."""
import collections

SHOWN = 15        # reasons listed; the rest are counted on one line
REASON_WIDTH = 150


def skip_reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ").strip()


def skip_lines(reports) -> list[str]:
    skipped = [r for r in reports if getattr(r, "skipped", False) and not hasattr(r, "wasxfail")]
    if not skipped:
        return []
    cases = sum("[" in r.nodeid for r in skipped)
    counts = collections.Counter(skip_reason(r) for r in skipped)
    lines = [f"{len(skipped):,} tests skipped ({cases:,} of them cases of a parametrised matrix that do not apply to "
             f"that case), by reason:"]
    width = len(f"{counts.most_common(1)[0][1]:,}")
    for reason, count in counts.most_common(SHOWN):
        shown = reason if len(reason) <= REASON_WIDTH else reason[:REASON_WIDTH - 3] + "..."
        lines.append(f"  {count:>{width},}  {shown}")
    if len(counts) > SHOWN:
        rest = sum(count for _, count in counts.most_common()[SHOWN:])
        lines.append(f"  {rest:>{width},}  ({len(counts) - SHOWN} other reasons)")
    return lines
