//! A small line diff for the freshness assertions' messages.

use core::fmt::Write as _;

// ---------------------------------------------------------------------------
// Line diff

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Above this many cells the LCS table is not built; the changed middle is
/// shown as removed, then added.
const MAX_TABLE: usize = 4_000_000;
/// Diff lines shown before the rest is summarized.
const MAX_SHOWN: usize = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Removed(usize),
    Added(usize),
}

/// A unified diff, `-` for `actual` (the file) and `+` for `expected`.
pub(super) fn diff(actual: &str, expected: &str, label: &str) -> String {
    let old: Vec<&str> = actual.split_inclusive('\n').collect();
    let new: Vec<&str> = expected.split_inclusive('\n').collect();
    let ops = diff_ops(&old, &new);

    let mut out = format!("--- {label} (on disk)\n+++ generated\n");
    let mut shown = 0;
    let mut i = 0;
    while i < ops.len() {
        if matches!(ops[i], Op::Same(..)) {
            i += 1;
            continue;
        }
        // A hunk: from CONTEXT lines before this change to CONTEXT lines
        // after the last change that is at most 2 * CONTEXT lines further.
        let first = i.saturating_sub(CONTEXT);
        let mut last = i;
        let mut j = i;
        while j < ops.len() {
            if !matches!(ops[j], Op::Same(..)) {
                last = j;
            } else if j - last > 2 * CONTEXT {
                break;
            }
            j += 1;
        }
        let stop = (last + 1 + CONTEXT).min(ops.len());
        let hunk = &ops[first..stop];
        let (old_start, new_start) = position(&ops[first..], old.len(), new.len());
        let old_count = hunk.iter().filter(|o| !matches!(o, Op::Added(_))).count();
        let new_count = hunk.iter().filter(|o| !matches!(o, Op::Removed(_))).count();
        let _ = writeln!(
            out,
            "@@ -{},{old_count} +{},{new_count} @@",
            old_start + usize::from(old_count > 0),
            new_start + usize::from(new_count > 0),
        );
        for op in hunk {
            if shown == MAX_SHOWN {
                out.push_str("… (the rest of the diff is not shown)\n");
                return out;
            }
            shown += 1;
            let (sign, line) = match *op {
                Op::Same(o, _) => (' ', old[o]),
                Op::Removed(o) => ('-', old[o]),
                Op::Added(n) => ('+', new[n]),
            };
            match line.strip_suffix('\n') {
                Some(line) => {
                    let _ = writeln!(out, "{sign}{line}");
                }
                None => {
                    let _ = writeln!(out, "{sign}{line}\n\\ No newline at end of file");
                }
            }
        }
        i = stop;
    }
    out
}

/// The 0-based line numbers in `old` and `new` where `ops` begins.
fn position(ops: &[Op], old_len: usize, new_len: usize) -> (usize, usize) {
    let mut old_end = old_len;
    let mut new_end = new_len;
    for op in ops {
        match *op {
            Op::Same(..) => {
                old_end -= 1;
                new_end -= 1;
            }
            Op::Removed(_) => old_end -= 1,
            Op::Added(_) => new_end -= 1,
        }
    }
    (old_end, new_end)
}

/// The edit script from `old` to `new`: common prefix and suffix, and a
/// longest common subsequence of the middle.
fn diff_ops(old: &[&str], new: &[&str]) -> Vec<Op> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_mid, new_mid) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );

    let mut ops: Vec<Op> = (0..prefix).map(|i| Op::Same(i, i)).collect();
    let (n, m) = (old_mid.len(), new_mid.len());
    if (n + 1).saturating_mul(m + 1) > MAX_TABLE {
        ops.extend((0..n).map(|i| Op::Removed(prefix + i)));
        ops.extend((0..m).map(|j| Op::Added(prefix + j)));
    } else {
        // lcs[i][j]: the LCS length of old_mid[i..] and new_mid[j..].
        let width = m + 1;
        let mut lcs = vec![0u32; (n + 1) * width];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * width + j] = if old_mid[i] == new_mid[j] {
                    lcs[(i + 1) * width + j + 1] + 1
                } else {
                    lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && old_mid[i] == new_mid[j] {
                ops.push(Op::Same(prefix + i, prefix + j));
                i += 1;
                j += 1;
            } else if j == m || (i < n && lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
                ops.push(Op::Removed(prefix + i));
                i += 1;
            } else {
                ops.push(Op::Added(prefix + j));
                j += 1;
            }
        }
    }
    let (old_tail, new_tail) = (old.len() - suffix, new.len() - suffix);
    ops.extend((0..suffix).map(|k| Op::Same(old_tail + k, new_tail + k)));
    ops
}
