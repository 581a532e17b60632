#!/usr/bin/env python3
"""What a machine costs a user's build: binary size and build time.

Generates user crates with 1, 10 and 50 payout-like machines (6 states, a
guard, a bound `set`, a version column, an in-flight state, history on
half), each calling `apply` on two transitions, and a baseline crate that
runs the same two statements per machine written by hand with sqlx. Each
crate is built in release mode with one backend feature (`sqlite`) and
with all three; the stripped binary's size and section sizes, the CPU time
of the crate's own release build (after a `touch`), and how often one
machine's `UPDATE` text appears in the binary are printed as a table.

    python3 tools/binsize/measure.py [--repo DIR] [--out DIR] [--counts 1,10,50]

`--repo` is the stateguard checkout to measure (default: this one), so
that two commits can be compared by pointing it at a worktree of each.
"""

import argparse
import os
import pathlib
import resource
import shutil
import subprocess
import sys

MACHINE = """
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts_{i}", column = "status", key = "id", version = "version"{history})]
pub enum Payout{i} {{
    #[state(initial)]
    #[transition(start -> Sending, guard = "amount_cents <= 95000")]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    #[transition(retry -> Pending)]
    Failed,
    #[transition(archive -> Archived)]
    Cancelled,
    Archived,
}}
"""

MACHINE_CALLS = """
    let _ = Payout{i}::start().apply(&pool, id).await;
    let _ = Payout{i}::confirm(bank_ref.clone()).apply(&pool, id).await;
"""

BASELINE_CALLS = """
    let _ = sqlx::query("UPDATE payouts_{i} SET status = 'sending', version = version + 1 WHERE id = ?1 AND status IN ('pending') AND amount_cents <= 95000")
        .bind(id)
        .execute(&pool)
        .await;
    let _ = sqlx::query("UPDATE payouts_{i} SET status = 'sent', bank_ref = ?2, version = version + 1 WHERE id = ?1 AND status IN ('sending')")
        .bind(id)
        .bind(bank_ref.clone())
        .execute(&pool)
        .await;
"""

MAIN = """
#[tokio::main(flavor = "current_thread")]
async fn main() {{
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.expect("sqlite");
    let id: i64 = std::env::args().count() as i64;
    let bank_ref = String::from("ref");
{calls}
}}
"""


def cargo_toml(name, repo, features, baseline):
    stateguard = "" if baseline else (
        f'stateguard = {{ path = "{repo}", features = {features!r} }}\n'.replace("'", '"')
    )
    return (
        f'[package]\nname = "{name}"\nversion = "0.0.0"\nedition = "2024"\npublish = false\n\n'
        f"[dependencies]\n{stateguard}"
        'sqlx = { version = "0.9", default-features = false, features = ["runtime-tokio", "sqlite"] }\n'
        'tokio = { version = "1", features = ["rt", "macros"] }\n\n'
        "[profile.release]\nstrip = false\n\n[workspace]\n"
    )


def generate(root, name, repo, features, count, baseline):
    crate = root / name
    (crate / "src").mkdir(parents=True, exist_ok=True)
    (crate / "Cargo.toml").write_text(cargo_toml(name, repo, features, baseline))
    parts = [] if baseline else ["use stateguard::StateMachine;\n"]
    calls = []
    for i in range(count):
        if not baseline:
            history = f', history = "payouts_{i}_history"' if i % 2 == 0 else ""
            parts.append(MACHINE.format(i=i, history=history))
            calls.append(MACHINE_CALLS.format(i=i))
        else:
            calls.append(BASELINE_CALLS.format(i=i))
    parts.append(MAIN.format(calls="".join(calls)))
    (crate / "src" / "main.rs").write_text("".join(parts))
    return crate


def cpu_seconds(command, cwd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sections(binary):
    out = subprocess.run(["size", "-A", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    sizes = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].startswith(".") and fields[1].isdigit():
            sizes[fields[0]] = int(fields[1])
    return sizes


def measure(crate, target, needle):
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    build = ["cargo", "build", "--release", "--quiet"]
    # Dependencies first, untimed; then the crate alone, after a touch.
    subprocess.run(build, cwd=crate, env=env, check=True)
    (crate / "src" / "main.rs").touch()
    seconds = cpu_seconds(build, crate, env)
    binary = target / "release" / crate.name
    stripped = target / f"{crate.name}.stripped"
    shutil.copy(binary, stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    data = stripped.read_bytes()
    found = data.count(needle.encode()) if needle else 0
    return stripped.stat().st_size, sections(stripped), seconds, found


def main():
    here = pathlib.Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default=str(here))
    parser.add_argument("--out", default=str(here / "target" / "binsize"))
    parser.add_argument("--counts", default="1,10,50")
    args = parser.parse_args()
    repo = pathlib.Path(args.repo).resolve()
    out = pathlib.Path(args.out).resolve()
    counts = [int(c) for c in args.counts.split(",")]
    # The start of machine 0's `start` UPDATE as SQLite runs it, which its
    # `expecting` variant and its batch UPDATE share: 3 when each of the
    # three is stored once (the text is the same before and after the
    # bind plans).
    needle = 'UPDATE "payouts_0" SET "status" = \'sending\', "sending_since" = strftime'
    rows = []
    for label, features in [("sqlite", ["sqlite"]), ("all three", ["sqlite", "postgres", "mysql"])]:
        target = out / ("target-" + "-".join(features))
        for count in counts:
            for baseline in (False, True):
                name = f"{'hand' if baseline else 'sg'}_{count}_{'_'.join(features)}"
                crate = generate(out / "crates", name, repo, features, count, baseline)
                size, secs, cpu, found = measure(crate, target, needle)
                rows.append((label, "sqlx by hand" if baseline else "stateguard", count,
                             size, secs.get(".text", 0), secs.get(".rodata", 0), cpu, found))
                print(f"{rows[-1]}", file=sys.stderr, flush=True)
    print("| features | crate | machines | stripped KiB | .text KiB | .rodata KiB | "
          "release CPU-s | copies of 3 UPDATEs' shared start |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, kind, count, size, text, rodata, cpu, found in rows:
        print(f"| {label} | {kind} | {count} | {size / 1024:.0f} | {text / 1024:.0f} | "
              f"{rodata / 1024:.0f} | {cpu:.2f} | {found} |")
    # Per machine: the slope between the fewest and the most machines.
    print()
    print("| features | crate | KiB per machine | CPU-s per machine |")
    print("| --- | --- | ---: | ---: |")
    for label in ("sqlite", "all three"):
        for kind in ("stateguard", "sqlx by hand"):
            mine = sorted((r for r in rows if r[0] == label and r[1] == kind), key=lambda r: r[2])
            if len(mine) < 2:
                continue
            low, high = mine[0], mine[-1]
            machines = high[2] - low[2]
            print(f"| {label} | {kind} | {(high[3] - low[3]) / 1024 / machines:.1f} | "
                  f"{(high[6] - low[6]) / machines:.3f} |")


if __name__ == "__main__":
    main()
