"""Run many fault-injection schedules and print the counts (SPEC B2).

    python -m tests.harness.run --schedules 10000      # the long run (a couple of minutes)
    python -m tests.harness.run --seed 87 --trace      # replay one schedule step by step
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.harness.sim import (
    Report,
    recorded_schedule,
    run_choices,
    run_many,
    run_schedule,
    shrink,
)


def print_report(rep: Report, elapsed: float) -> None:
    print(f"schedules            {rep.schedules}")
    print(f"steps                {rep.steps}")
    print(f"rows / launches      {rep.rows} / {rep.launches}   dead-letters {rep.dead_letters}")
    print(f"faults injected      {sum(rep.faults.values())}")
    for k, n in sorted(rep.faults.items(), key=lambda kv: -kv[1]):
        print(f"  {k:58} {n}")
    print(f"world actions        {sum(rep.env.values())}")
    for k, n in sorted(rep.env.items(), key=lambda kv: -kv[1]):
        print(f"  {k:58} {n}")
    print("residual-window and allowed-skip events (reported, not violations)")
    for k, n in sorted(rep.residual.items()):
        print(f"  {k:58} {n}")
    print("production paths driven")
    for k, n in sorted(rep.covered.items()):
        print(f"  {k:58} {n}")
    print(f"invariant violations {len(rep.violations)}")
    for v in rep.violations[:50]:
        print(f"  {v}")
    print(f"elapsed              {elapsed:.1f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedules", type=int, default=10_000)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=300, help="fault-phase steps per schedule")
    ap.add_argument("--seed", type=int, help="run this one schedule")
    ap.add_argument("--trace", action="store_true", help="print the schedule's steps")
    ap.add_argument("--shrink", action="store_true",
                    help="with --seed: if the schedule fails, shrink it and print the minimal steps")
    ap.add_argument("--store", choices=["memory", "mongomock", "wire"], default="memory",
                    help="the shared store: the memory twins, the Mongo adapters over mongomock, "
                         "or over a real wire server with failCommand failpoints armed between "
                         "turns (MONGODB_URI, else secantusd-py started here)")
    ap.add_argument("--no-membership", dest="membership", action="store_false",
                    help="ownership off: every replica drains every tenant (by default replicas "
                         "drain only their own tenants, S1, and membership actions are on)")
    args = ap.parse_args()
    t0 = time.monotonic()
    if args.seed is not None:
        rep = run_schedule(args.seed, args.steps, trace=args.trace, store=args.store,
                           membership=args.membership)
        if args.trace:
            print("\n".join(rep.trace))
        print_report(rep, time.monotonic() - t0)
        if rep.violations and args.shrink:
            _, recorded = recorded_schedule(args.seed, args.steps)
            minimal = shrink(recorded, lambda cs: bool(run_choices(cs).violations))
            small = run_choices(minimal, trace=True)
            print(f"\nminimal failing schedule ({len(minimal)} choices):")
            print("\n".join(small.trace + small.violations))
        return 1 if rep.violations else 0

    def progress(done: int, total: Report) -> None:
        if done % 500 == 0 or done == args.schedules:
            print(f"  {done}/{args.schedules} schedules, {len(total.violations)} violations, "
                  f"{time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)

    rep = run_many(args.schedules, args.first_seed, args.steps, progress, store=args.store,
                   membership=args.membership)
    print_report(rep, time.monotonic() - t0)
    return 1 if rep.violations else 0


if __name__ == "__main__":
    sys.exit(main())
