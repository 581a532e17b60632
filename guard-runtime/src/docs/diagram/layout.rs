//! Where everything goes: a layered layout, top to bottom.
//!
//! 1. Edges that lead back up are found by a depth-first walk from the
//!    initial state, in declaration order, and laid out as if reversed.
//! 2. Each state sits one layer below the lowest state with an edge into
//!    it; an edge that spans several layers passes a point in each layer
//!    between ("dummy" nodes), so that it is laid out like a chain of short
//!    edges.
//! 3. Each layer is ordered by the mean position of its neighbours, sweeping
//!    down and up, keeping the order with the fewest crossings.
//! 4. Each node is placed over (or under) its neighbours, as near as its
//!    layer's order and spacing allow.
//!
//! Steps 1 to 4 are `rank.rs`'s; this file measures the boxes, runs them,
//! and routes the edges and their labels.
//!
//! Text is measured as a monospace font draws it: every character 0.62 of
//! the font's size wide, characters of East Asian scripts and emoji twice
//! that.

use super::rank::{Arc, MARGIN, Node, layer, order, place, reverse_back_edges};
use super::{Diagram, Role, shown};

/// The font sizes, in pixels: a state's name, its database string, its
/// in-flight line, an edge's label.
pub(crate) const NAME_PX: f64 = 14.0;
pub(crate) const DB_PX: f64 = 12.0;
pub(crate) const BADGE_PX: f64 = 11.0;
pub(crate) const LABEL_PX: f64 = 12.0;

/// Space between layers, and inside a box.
const LAYER_GAP: f64 = 72.0;
const PAD_X: f64 = 14.0;
/// Room above the first layer for the initial state's dot.
const TOP: f64 = 34.0;
/// A box: its height, and with an in-flight line.
const BOX_H: f64 = 46.0;
const BOX_H_IN_FLIGHT: f64 = 62.0;
/// A label's height.
pub(crate) const LABEL_H: f64 = 17.0;

/// The width of `text` in a monospace font of `px` pixels.
pub(crate) fn text_width(text: &str, px: f64) -> f64 {
    let units: f64 = text.chars().map(|c| if wide(c) { 2.0 } else { 1.0 }).sum();
    units * px * 0.62
}

/// Whether a monospace font draws `c` two cells wide: East Asian scripts
/// and emoji.
fn wide(c: char) -> bool {
    matches!(u32::from(c), 0x1100..=0x115F | 0x2E80..=0xA4CF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6 | 0x1F300..=0x1FAFF | 0x20000..=0x3FFFD)
}

/// The texts of a state's box: its name, its database string, and its
/// in-flight line.
pub(crate) fn box_lines(machine: &Diagram, state: usize) -> (String, String, Option<String>) {
    let s = &machine.states[state];
    let badge = s.in_flight.as_ref().map(|f| match f.attempts {
        Some(n) => format!("in flight · lease {} · {n} attempts", f.lease),
        None => format!("in flight · lease {}", f.lease),
    });
    (shown(s.name), format!("'{}'", shown(s.db)), badge)
}

/// An edge's label: its transition's name, and its guard in brackets.
pub(crate) fn edge_label(machine: &Diagram, transition: usize) -> String {
    let t = &machine.transitions[transition];
    match t.guard {
        Some(guard) => format!("{} [{}]", shown(t.name), shown(guard)),
        None => shown(t.name),
    }
}

/// A rectangle.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Rect {
    fn overlaps(&self, other: &Rect) -> bool {
        self.x < other.x + other.w
            && other.x < self.x + self.w
            && self.y < other.y + other.h
            && other.y < self.y + self.h
    }
}

/// One edge as drawn: from one source to the target.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    /// The transition it draws.
    pub transition: usize,
    /// What it passes through, from its source to its target: a path of
    /// cubic segments whose tangents are vertical at every point.
    pub points: Vec<(f64, f64)>,
    /// Where its label's box goes.
    pub label: Rect,
    /// What its transition is to the state it leaves.
    pub role: Role,
}

/// Where everything goes.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub width: f64,
    pub height: f64,
    /// Each state's box, in declaration order.
    pub boxes: Vec<Rect>,
    pub edges: Vec<Edge>,
    /// Where the legend's line goes.
    pub legend_y: f64,
}

pub(crate) fn layout(machine: &Diagram) -> Layout {
    let n = machine.states.len();
    // No transition leads from a state to itself: the derive refuses one
    // (`check/graph.rs`), so such an edge is not drawn.
    let mut arcs: Vec<Arc> = Vec::new();
    for (t, transition) in machine.transitions.iter().enumerate() {
        for &(from, role) in &transition.sources {
            if from != transition.target {
                arcs.push(Arc {
                    transition: t,
                    role,
                    from,
                    to: transition.target,
                    reversed: false,
                    chain: Vec::new(),
                });
            }
        }
    }
    let discovered = reverse_back_edges(machine, &mut arcs);
    let layers = layer(n, &arcs);

    // The nodes: every state, then the points of edges spanning layers.
    let mut nodes: Vec<Node> = (0..n)
        .map(|s| {
            let w = box_width(machine, s);
            Node {
                layer: layers[s],
                left: w / 2.0,
                right: w / 2.0,
                dummy: false,
            }
        })
        .collect();
    for arc in &mut arcs {
        let (top, bottom) = match arc.reversed {
            true => (arc.to, arc.from),
            false => (arc.from, arc.to),
        };
        arc.chain.push(top);
        for layer in layers[top] + 1..layers[bottom] {
            arc.chain.push(nodes.len());
            nodes.push(Node {
                layer,
                left: 6.0,
                right: 6.0,
                dummy: true,
            });
        }
        arc.chain.push(bottom);
    }
    let depth = layers.iter().copied().max().unwrap_or(0) + 1;
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for arc in &arcs {
        for pair in arc.chain.windows(2) {
            down[pair[0]].push(pair[1]);
            up[pair[1]].push(pair[0]);
        }
    }
    let order = order(&nodes, depth, &discovered, &up, &down);
    let xs = place(&nodes, &order, &up, &down);

    // Heights: a layer is as tall as its tallest box.
    let mut layer_h = vec![BOX_H; depth];
    for (s, state) in machine.states.iter().enumerate() {
        if state.in_flight.is_some() {
            layer_h[layers[s]] = BOX_H_IN_FLIGHT;
        }
    }
    let mut layer_top = vec![MARGIN + TOP; depth];
    for l in 1..depth {
        layer_top[l] = layer_top[l - 1] + layer_h[l - 1] + LAYER_GAP;
    }
    let boxes: Vec<Rect> = (0..n)
        .map(|s| Rect {
            x: xs[s] - nodes[s].left,
            y: layer_top[layers[s]],
            w: nodes[s].left * 2.0,
            h: layer_h[layers[s]],
        })
        .collect();
    let bottom_of = |node: usize| layer_top[nodes[node].layer] + layer_h[nodes[node].layer];
    let top_of = |node: usize| layer_top[nodes[node].layer];

    // Ports: where each edge meets a box, spread along its side in the
    // order of where the edges go.
    let mut bottom_ports: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    let mut top_ports: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    for (a, arc) in arcs.iter().enumerate() {
        let (first, last) = (arc.chain[0], arc.chain[arc.chain.len() - 1]);
        let (after_first, before_last) = (arc.chain[1], arc.chain[arc.chain.len() - 2]);
        bottom_ports[first].push((xs[after_first], a));
        top_ports[last].push((xs[before_last], a));
    }
    let mut port_x = vec![(0.0, 0.0); arcs.len()];
    for (s, ports) in bottom_ports.iter_mut().enumerate() {
        ports.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (i, &(_, a)) in ports.iter().enumerate() {
            port_x[a].0 = spread(&boxes[s], i, ports.len());
        }
    }
    for (s, ports) in top_ports.iter_mut().enumerate() {
        ports.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (i, &(_, a)) in ports.iter().enumerate() {
            port_x[a].1 = spread(&boxes[s], i, ports.len());
        }
    }

    // Each edge's path, top to bottom, then turned round for an edge that
    // leads up.
    let paths: Vec<Vec<(f64, f64)>> = arcs
        .iter()
        .enumerate()
        .map(|(a, arc)| {
            let mut points = vec![(port_x[a].0, bottom_of(arc.chain[0]))];
            for &dummy in &arc.chain[1..arc.chain.len() - 1] {
                points.push((xs[dummy], top_of(dummy)));
                points.push((xs[dummy], bottom_of(dummy)));
            }
            points.push((port_x[a].1, top_of(arc.chain[arc.chain.len() - 1])));
            if arc.reversed {
                points.reverse();
            }
            points
        })
        .collect();
    // Points along every path, so that a label can keep off other edges.
    let samples: Vec<Vec<(f64, f64)>> = paths
        .iter()
        .map(|points| {
            points
                .windows(2)
                .flat_map(|pair| {
                    (0..=16).map(move |i| cubic(pair[0], pair[1], f64::from(i) / 16.0))
                })
                .collect()
        })
        .collect();
    let mut edges = Vec::new();
    let mut labels: Vec<Rect> = Vec::new();
    for (a, (arc, points)) in arcs.iter().zip(paths).enumerate() {
        let text = edge_label(machine, arc.transition);
        let (w, h) = (text_width(&text, LABEL_PX) + 8.0, LABEL_H);
        // Along the first gap the edge crosses from its source: on the
        // edge, or beside it. A label may not cover a box or another
        // label, and covers as little of the other edges as it can;
        // the earlier places are preferred.
        let (p, q) = (points[0], points[1]);
        let mut places = Vec::new();
        for t in [0.5, 0.3, 0.7, 0.15, 0.85] {
            let (x, y) = cubic(p, q, t);
            for left in [x - w / 2.0, x + 5.0, x - w - 5.0] {
                places.push(Rect {
                    x: left,
                    y: y - h / 2.0,
                    w,
                    h,
                });
            }
        }
        // Only the points near the places can be covered.
        let near = Rect {
            x: p.0.min(q.0) - w - 6.0,
            y: p.1.min(q.1) - h,
            w: (p.0 - q.0).abs() + 2.0 * w + 12.0,
            h: (p.1 - q.1).abs() + 2.0 * h,
        };
        let inside =
            |r: &Rect, &(x, y): &(f64, f64)| x > r.x && x < r.x + r.w && y > r.y && y < r.y + r.h;
        let nearby: Vec<(f64, f64)> = samples
            .iter()
            .enumerate()
            .filter(|&(other, _)| other != a)
            .flat_map(|(_, points)| points.iter().copied())
            .filter(|point| inside(&near, point))
            .collect();
        let mut label = places[0];
        let mut best = f64::INFINITY;
        for (i, place) in places.iter().enumerate() {
            let outside = usize::from(place.x < MARGIN / 2.0);
            let hard = outside
                + labels
                    .iter()
                    .chain(&boxes)
                    .filter(|o| o.overlaps(place))
                    .count();
            let covered = nearby.iter().filter(|point| inside(place, point)).count();
            let cost = hard as f64 * 1000.0 + covered as f64 + i as f64 * 0.25;
            if cost < best {
                (best, label) = (cost, *place);
            }
            if hard == 0 && covered == 0 {
                break;
            }
        }
        labels.push(label);
        edges.push(Edge {
            transition: arc.transition,
            role: arc.role,
            points,
            label,
        });
    }
    let mut width = nodes
        .iter()
        .zip(&xs)
        .map(|(node, x)| x + node.right)
        .fold(0.0, f64::max);
    for edge in &edges {
        width = width.max(edge.label.x + edge.label.w);
    }
    let height = layer_top[depth - 1] + layer_h[depth - 1];
    Layout {
        width: width + MARGIN,
        height: height + MARGIN + 28.0,
        boxes,
        edges,
        legend_y: height + MARGIN + 12.0,
    }
}

/// The point at `t` of the segment from `p` to `q` whose tangents are
/// vertical at both ends.
pub(crate) fn cubic(p: (f64, f64), q: (f64, f64), t: f64) -> (f64, f64) {
    let mid = (p.1 + q.1) / 2.0;
    let (c1, c2) = ((p.0, mid), (q.0, mid));
    let u = 1.0 - t;
    let x = u * u * u * p.0 + 3.0 * u * u * t * c1.0 + 3.0 * u * t * t * c2.0 + t * t * t * q.0;
    let y = u * u * u * p.1 + 3.0 * u * u * t * c1.1 + 3.0 * u * t * t * c2.1 + t * t * t * q.1;
    (x, y)
}

/// The `i`th of `count` ports along a box's side, kept off its corners.
fn spread(b: &Rect, i: usize, count: usize) -> f64 {
    let inner = (b.w * 0.6).min(24.0 * count as f64);
    let start = b.x + (b.w - inner) / 2.0;
    start + inner * (i as f64 + 0.5) / count as f64
}

/// A state's box width: its widest line, padded.
fn box_width(machine: &Diagram, state: usize) -> f64 {
    let (name, db, badge) = box_lines(machine, state);
    let widest = text_width(&name, NAME_PX)
        .max(text_width(&db, DB_PX))
        .max(badge.map_or(0.0, |b| text_width(&b, BADGE_PX)));
    (widest + 2.0 * PAD_X).max(84.0)
}
