//! Which layer, and which place in it, each node of the layered graph
//! takes (`layout.rs` has the steps): the edges that lead back up, the
//! layers, the order within each layer, and each node's centre.

use super::{Diagram, Role};

/// Space around the drawing, and between the nodes of a layer.
pub(super) const MARGIN: f64 = 16.0;
const NODE_GAP: f64 = 36.0;
const DUMMY_GAP: f64 = 14.0;

/// A node of the layered graph: a state, or a point an edge passes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node {
    pub(super) layer: usize,
    /// Extent left and right of its centre.
    pub(super) left: f64,
    pub(super) right: f64,
    pub(super) dummy: bool,
}

/// An edge between two states, before it is drawn.
#[derive(Debug, Clone)]
pub(super) struct Arc {
    pub(super) transition: usize,
    pub(super) role: Role,
    pub(super) from: usize,
    pub(super) to: usize,
    /// Laid out from `to` to `from`.
    pub(super) reversed: bool,
    /// The nodes it passes, in layout order (top to bottom).
    pub(super) chain: Vec<usize>,
}

/// Marks the edges that lead back up as reversed, walking depth first from
/// the initial states, then from every state not reached, in declaration
/// order. Returns the states in the order the walk found them.
pub(super) fn reverse_back_edges(machine: &Diagram, arcs: &mut [Arc]) -> Vec<usize> {
    let n = machine.states.len();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (a, arc) in arcs.iter().enumerate() {
        out[arc.from].push(a);
    }
    // 0: not seen, 1: on the walk's path, 2: done.
    let mut mark = vec![0u8; n];
    let mut discovered = Vec::with_capacity(n);
    let roots = (0..n)
        .filter(|&s| machine.states[s].initial)
        .chain(0..n)
        .collect::<Vec<_>>();
    for root in roots {
        if mark[root] != 0 {
            continue;
        }
        mark[root] = 1;
        discovered.push(root);
        let mut stack = vec![(root, 0usize)];
        while let Some((state, next)) = stack.last_mut() {
            let state = *state;
            let Some(&a) = out[state].get(*next) else {
                mark[state] = 2;
                stack.pop();
                continue;
            };
            *next += 1;
            let to = arcs[a].to;
            match mark[to] {
                0 => {
                    mark[to] = 1;
                    discovered.push(to);
                    stack.push((to, 0));
                }
                1 => arcs[a].reversed = true,
                _ => {}
            }
        }
    }
    discovered
}

/// Each state's layer: one below the lowest state with an edge into it,
/// the edges that lead back up counted the other way.
pub(super) fn layer(n: usize, arcs: &[Arc]) -> Vec<usize> {
    let mut layers = vec![0usize; n];
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for arc in arcs {
        let (from, to) = match arc.reversed {
            true => (arc.to, arc.from),
            false => (arc.from, arc.to),
        };
        out[from].push(to);
        indegree[to] += 1;
    }
    let mut ready: Vec<usize> = (0..n).filter(|&s| indegree[s] == 0).collect();
    ready.reverse();
    while let Some(s) = ready.pop() {
        for &to in &out[s] {
            layers[to] = layers[to].max(layers[s] + 1);
            indegree[to] -= 1;
            if indegree[to] == 0 {
                ready.push(to);
            }
        }
    }
    layers
}

/// Each layer's nodes, left to right: first as the walk found the states,
/// then by the mean position of their neighbours, sweeping down and up,
/// keeping the order with the fewest crossings.
pub(super) fn order(
    nodes: &[Node],
    depth: usize,
    discovered: &[usize],
    up: &[Vec<usize>],
    down: &[Vec<usize>],
) -> Vec<Vec<usize>> {
    let mut rank = vec![usize::MAX; nodes.len()];
    for (i, &s) in discovered.iter().enumerate() {
        rank[s] = i;
    }
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (node, n) in nodes.iter().enumerate() {
        order[n.layer].push(node);
    }
    let mut position = vec![0.0; nodes.len()];
    // The first order: states as found, each point under its edge's
    // first node.
    for layer in &mut order {
        let mut keyed: Vec<(f64, usize)> = layer
            .iter()
            .map(|&node| {
                let key = match nodes[node].dummy {
                    true => mean(&up[node], &position).unwrap_or(0.0),
                    false => rank[node] as f64,
                };
                (key, node)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        *layer = keyed.into_iter().map(|(_, node)| node).collect();
        for (i, &node) in layer.iter().enumerate() {
            position[node] = i as f64;
        }
    }
    let mut best = order.clone();
    let mut fewest = crossings(&order, down, &position);
    for sweep in 0..8 {
        let layers: Vec<usize> = match sweep % 2 {
            0 => (1..depth).collect(),
            _ => (0..depth.saturating_sub(1)).rev().collect(),
        };
        for l in layers {
            let neighbours = match sweep % 2 {
                0 => up,
                _ => down,
            };
            let mut keyed: Vec<(f64, usize)> = order[l]
                .iter()
                .map(|&node| {
                    let key = mean(&neighbours[node], &position).unwrap_or(position[node]);
                    (key, node)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            order[l] = keyed.into_iter().map(|(_, node)| node).collect();
            for (i, &node) in order[l].iter().enumerate() {
                position[node] = i as f64;
            }
        }
        let now = crossings(&order, down, &position);
        if now < fewest {
            fewest = now;
            best = order.clone();
        }
    }
    best
}

/// The mean of `position` over `of`, if it names any node.
fn mean(of: &[usize], position: &[f64]) -> Option<f64> {
    (!of.is_empty()).then(|| of.iter().map(|&n| position[n]).sum::<f64>() / of.len() as f64)
}

/// How many pairs of edges between adjacent layers cross.
fn crossings(order: &[Vec<usize>], down: &[Vec<usize>], position: &[f64]) -> usize {
    let mut count = 0;
    for layer in order {
        let edges: Vec<(f64, f64)> = layer
            .iter()
            .flat_map(|&node| down[node].iter().map(move |&to| (node, to)))
            .map(|(from, to)| (position[from], position[to]))
            .collect();
        for (i, a) in edges.iter().enumerate() {
            for b in &edges[i + 1..] {
                if (a.0 - b.0) * (a.1 - b.1) < 0.0 {
                    count += 1;
                }
            }
        }
    }
    count
}

/// Each node's centre: packed left to right in its layer's order, then
/// moved towards its neighbours, sweeping down and up, as far as the
/// spacing allows.
pub(super) fn place(
    nodes: &[Node],
    order: &[Vec<usize>],
    up: &[Vec<usize>],
    down: &[Vec<usize>],
) -> Vec<f64> {
    let gap = |a: usize, b: usize| match nodes[a].dummy || nodes[b].dummy {
        true => DUMMY_GAP,
        false => NODE_GAP,
    };
    let separation = |a: usize, b: usize| nodes[a].right + gap(a, b) + nodes[b].left;
    let mut x = vec![0.0; nodes.len()];
    for layer in order {
        let mut at = 0.0;
        for (i, &node) in layer.iter().enumerate() {
            at = match i {
                0 => nodes[node].left,
                _ => at + separation(layer[i - 1], node),
            };
            x[node] = at;
        }
    }
    for sweep in 0..12 {
        let (layers, neighbours): (Vec<usize>, _) = match sweep % 2 {
            0 => ((1..order.len()).collect(), up),
            _ => ((0..order.len().saturating_sub(1)).rev().collect(), down),
        };
        for l in layers {
            let layer = &order[l];
            let desired: Vec<f64> = layer
                .iter()
                .map(|&node| mean(&neighbours[node], &x).unwrap_or(x[node]))
                .collect();
            // Two placements that keep the spacing, one pushed right and
            // one pushed left; their mean keeps it too.
            let mut right = desired.clone();
            for i in 1..layer.len() {
                right[i] = right[i].max(right[i - 1] + separation(layer[i - 1], layer[i]));
            }
            let mut left = desired.clone();
            for i in (0..layer.len().saturating_sub(1)).rev() {
                left[i] = left[i].min(left[i + 1] - separation(layer[i], layer[i + 1]));
            }
            for (i, &node) in layer.iter().enumerate() {
                x[node] = (right[i] + left[i]) / 2.0;
            }
        }
    }
    let shift = nodes
        .iter()
        .zip(&x)
        .map(|(node, x)| x - node.left)
        .fold(f64::INFINITY, f64::min);
    x.iter().map(|x| x - shift + MARGIN).collect()
}
