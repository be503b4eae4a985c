"""The job table's answers in Python, from the rows its SQL gave: ``JobTable`` and what it says of
itself (its loaders, slowest ranks, notices), each trace's damage (``damage``), the shard check per
epoch (``shard_checks``: a digest is zlib'd, which no SQL engine reads) and who was last per step.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from loaderscope.model.ranks import MAX_SHARD_LENGTH, shard_report, shard_text
from loaderscope.traces.jobbudget import Deadline, JobBudget, size_text


@dataclass(frozen=True)
class JobTable:
    """The job's answers: a row per run (a loader of a rank), a row per step of each loader, a shard
    check per epoch of a loader that every rank of it reported."""

    ranks: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    shards: list[dict[str, Any]]
    damaged: list[dict[str, Any]] = field(default_factory=list)  # damage(): each trace with something wrong
    world_sizes: dict[tuple[Any, str], int | None] = field(default_factory=dict)  # (job, loader): run_start's

    def as_json(self) -> dict[str, Any]:
        """The table as JSON values: a shard report's ``per_rank`` is keyed by the rank as text."""
        shards = [check | {"report": check["report"] | {"per_rank": {str(rank): n for rank, n in per_rank.items()}}}
                  if (per_rank := check["report"].get("per_rank")) is not None else check for check in self.shards]
        return {"ranks": self.ranks, "steps": self.steps, "shards": shards, "loaders": self.loaders(),
                "damaged": self.damaged, "notices": self.notices()}

    def notices(self) -> list[str]:
        """What the table lacks, in sentences: per loader whose ranks fall short of its world size, how
        many of how many were tabled and which are missing; per problem, the traces that have it."""
        lines = []
        for entry in self.loaders():
            if entry["world_size"] is not None and entry["missing_ranks"]:
                named = f"{entry['loader']}: " if len(self.loaders()) > 1 else ""
                lines.append(f"{named}{entry['ranks']:,} of {entry['world_size']:,} ranks tabled (world_size "
                             f"{entry['world_size']:,}); missing: {_count(len(entry['missing_ranks']), 'rank')} "
                             f"{rank_list(entry['missing_ranks'])}")
        for problem in dict.fromkeys(d["problem"] for d in self.damaged):
            mine = [d for d in self.damaged if d["problem"] == problem]
            shown = "; ".join(f"{_who(d)}: {d['detail']}" for d in mine[:NOTICE_TRACES])
            more = f"; and {len(mine) - NOTICE_TRACES:,} more" if len(mine) > NOTICE_TRACES else ""
            lines.append(f"{_count(len(mine), 'trace')} {PROBLEM_WORDS.get(problem, problem)}: {shown}{more}")
        return lines

    def loaders(self) -> list[dict[str, Any]]:
        """Per loader of each job, in the rows' order: its name, how many ranks and steps it has, and its
        slowest rank (``slowest_rank``)."""
        out: dict[tuple[Any, str], dict[str, Any]] = {}
        for row in self.ranks:
            entry = out.setdefault((row["job"], row["loader"]), {"job": row["job"], "loader": row["loader"],
                                                                  "name": row["name"], "ranks": set()})
            entry["ranks"].add(row["rank"])
        steps: dict[tuple[Any, str], int] = {}
        for step in self.steps:
            steps[(step["job"], step["loader"])] = steps.get((step["job"], step["loader"]), 0) + 1
        return [entry | {"ranks": len(entry["ranks"]), "steps": steps.get(key, 0), "slowest": self.slowest_rank(*key),
                         "world_size": (world := self.world_sizes.get(key)),
                         "missing_ranks": sorted(set(range(world)) - entry["ranks"]) if world else []}
                for key, entry in out.items()]

    def slowest_rank(self, job: Any, loader: str) -> dict[str, Any] | None:
        """The rank of this loader most often last to deliver a step (lowest rank on a tie), or None if
        none was: one rank (a single process) has none."""
        mine = [r for r in self.ranks if r["job"] == job and r["loader"] == loader]
        ranked = [r for r in mine if r["slowest_steps"]]
        if not ranked or len({r["rank"] for r in mine}) < 2:
            return None
        top = max(ranked, key=lambda r: (r["slowest_steps"], -r["rank"]))
        steps = sum(1 for s in self.steps if s["job"] == job and s["loader"] == loader)
        return {"rank": top["rank"], "steps": top["slowest_steps"], "of": steps, "worst_lag": top["worst_lag"]}


NOTICE_TRACES = 5  # traces named per problem; the rest are counted
PROBLEM_WORDS = {"events missing": "with events missing", "no run_start": "without a run_start",
                 "no run_end": "without a run_end"}


def _who(damaged: dict[str, Any]) -> str:
    rank = damaged["rank"]
    whose = "" if rank is None else f"rank {rank}{' (by its name)' if damaged['rank_from_name'] else ''}, "
    return f"{whose}{damaged['trace']}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def rank_list(ranks: Sequence[int], most: int = 12) -> str:
    """Ranks as runs (``0–3, 7, 9–12``), the first ``most`` runs and a count of the rest."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    shown = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs[:most])
    return shown + (f", … ({len(runs) - most:,} more runs)" if len(runs) > most else "")


def shard_checks(rows: list[dict[str, Any]], ranks: Sequence[dict[str, Any]], budget: JobBudget,
                  deadline: Deadline) -> Iterator[dict[str, Any]]:
    """One check per (loader, epoch) every rank of that loader reported a digest for, while the
    budget of decoded digests lasts: a check past it says so."""
    expected: dict[tuple[Any, Any], set[int]] = {}
    for r in ranks:
        expected.setdefault((r["job"], r["loader"]), set()).add(r["rank"])
    groups: dict[tuple[Any, Any, int], dict[int, dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["job"], row["loader"], row["epoch"]), {})[row["rank"]] = row
    spent = 0
    for (job, loader, epoch), ends in groups.items():
        if set(ends) != expected.get((job, loader), set()):
            continue
        deadline.check()
        length = next(iter(ends.values()))["shard_length"] or 0
        cost = length * len(ends) if 0 <= length <= MAX_SHARD_LENGTH else 0  # a longer one is refused by its length
        report: dict[str, Any]
        if spent + cost > budget.shard_bytes:
            report = {"error": budget.refusal("shard_bytes", f"its digests ({len(ends)} × {length:,} indices), "
                                              "with the "
                                              f"checks before it, come to {size_text(spent + cost)} decoded",
                                              spent + cost)}
        else:
            spent += cost
            try:
                report = shard_report(ends, length)
            except Exception as exc:  # ValueError (decode_shard), TypeError (not text): said
                report = {"error": f"a shard digest cannot be decoded: {exc}"}
        yield {"job": job, "loader": loader, "epoch": epoch, "report": report}


def shard_text_of(check: dict[str, Any]) -> str:
    """One shard check in words (``ranks.shard_text``), or why its digests could not be read."""
    report = check["report"]
    if "error" in report:
        return f"epoch {check['epoch']}: the shards were not checked: {report['error']}"
    return shard_text(check["epoch"], report)


RANK_IN_NAME = re.compile(r"-rank([0-9]+)-")  # paths.trace_path's names: the rank of a trace unread


def damage(paths: Sequence[str], unreadable: list[dict[str, Any]],
           health: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What is wrong with each trace that has something wrong, in path order: ``unreadable`` (left out,
    or its parts from one on), ``empty`` (no event), ``no run_start`` (left out: its names and clock are
    missing), ``events missing`` (gaps in its seq numbers) or ``no run_end`` (still being written, or its
    writer was killed). Its rank and loader where its run_start says them, else its rank as its file's
    name gives it (``rank_from_name``). A copy of another trace's recording, or a run of another job, is
    left out of the table by design and not named."""
    seen = {row["file"]: row for row in health}
    found: list[dict[str, Any]] = []
    cut = {entry["run"]: entry for entry in unreadable}
    for run, path in enumerate(paths):
        row = seen.get(run)
        named = {"trace": path, "rank": row["rank"] if row and row["tabled"] else _rank_in_name(path),
                 "job": row["job"] if row and row["tabled"] else None,
                 "loader": row["loader"] if row and row["tabled"] else None,
                 "rank_from_name": not (row and row["tabled"])}
        if run in cut:
            found.append(named | {"problem": cut[run].get("problem", "unreadable"), "detail": cut[run]["detail"]})
        elif row is None or not row["events"]:
            found.append(named | {"problem": "empty", "detail": "no event in it"})
        elif not row["started"]:
            found.append(named | {"problem": "no run_start", "detail": "its first events are missing, and with them "
                                  "its rank's names and clock: left out"})
        elif not row["tabled"]:
            continue  # another job's run, or a copy of a recording another trace holds (RANKS_SQL counts it once)
        elif row["missing"]:
            found.append(named | {"problem": "events missing", "detail": f"{row['missing']:,} of its seq numbers are "
                                  "missing (lines skipped as unreadable, or events the probe dropped)"})
        elif not row["ended"]:
            found.append(named | {"problem": "no run_end", "detail": "still being written, or its process was killed"})
    return found


def _rank_in_name(path: str) -> int | None:
    found = RANK_IN_NAME.search(PurePosixPath(path).name)
    return int(found.group(1)) if found else None


def count_last(ranks: list[dict[str, Any]], steps: list[dict[str, Any]]) -> None:
    """Each run's steps it was last in and its worst lag there (sim.job.rank_figures); a loader of one
    rank (one process) is never last: its own runs are not ranks of each other."""
    ranks_of: dict[tuple[Any, Any], set[Any]] = {}
    for row in ranks:
        ranks_of.setdefault((row["job"], row["loader"]), set()).add(row["rank"])
    last: dict[tuple[Any, Any, Any], list[float]] = {}
    for step in steps:
        if len(ranks_of.get((step["job"], step["loader"]), ())) < 2:
            step["rank"] = None
        if step["rank"] is not None:
            last.setdefault((step["job"], step["loader"], step["rank"]), []).append(step["lag"])
    for row in ranks:
        mine = last.get((row["job"], row["loader"], row["rank"]), [])
        row["slowest_steps"], row["worst_lag"] = len(mine), max(mine) if mine else None
