//! The drawing: one `<svg>` element on one line, every style inline,
//! every text escaped.

use core::fmt::Write as _;

use super::layout::{self, BADGE_PX, DB_PX, LABEL_H, LABEL_PX, Layout, NAME_PX};
use super::{Diagram, Role};

/// The font of every text: a monospace one, whose widths `layout` knows.
const FONT: &str = "ui-monospace,SFMono-Regular,Menlo,Consolas,'DejaVu Sans Mono',monospace";

/// Colours: boxes and their text, an in-flight state's border, the edges
/// of moves, of `done` and of `failed` follow-ups, and the legend.
const INK: &str = "#1f2328";
const MUTED: &str = "#57606a";
const IN_FLIGHT: &str = "#b35900";
const MOVE: &str = "#6e7781";
const DONE: &str = "#1a7f37";
const FAILED: &str = "#cf222e";
const LEGEND: &str = "#8c959f";

pub(crate) fn draw(machine: &Diagram, layout: &Layout) -> String {
    let mut out = String::new();
    let items = legend_items(machine);
    let legend_width: f64 = items
        .iter()
        .map(|(text, _)| layout::text_width(text, BADGE_PX) + LEGEND_GAP)
        .sum();
    let w = layout.width.max(LEGEND_X + legend_width).ceil();
    let h = layout.height.ceil();
    let title = format!("State diagram of {}", machine.name);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" \
         height=\"{h}\" role=\"img\" aria-label=\"{}\" xml:space=\"preserve\" \
         style=\"max-width:100%;height:auto;white-space:pre\" font-family=\"{FONT}\">",
        escape(&title)
    );
    let _ = write!(out, "<title>{}</title>", escape(&title));
    for edge in &layout.edges {
        let colour = match edge.role {
            Role::Move => MOVE,
            Role::Done => DONE,
            Role::Failed => FAILED,
        };
        let mut d = String::new();
        let p = edge.points[0];
        let _ = write!(d, "M{} {}", n(p.0), n(p.1));
        let mut end = (p, p);
        for pair in edge.points.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let mid = (a.1 + b.1) / 2.0;
            let _ = write!(
                d,
                " C{} {} {} {} {} {}",
                n(a.0),
                n(mid),
                n(b.0),
                n(mid),
                n(b.0),
                n(b.1)
            );
            end = ((b.0, mid), b);
        }
        let _ = write!(
            out,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.4\"></path>"
        );
        let _ = write!(
            out,
            "<polygon points=\"{}\" fill=\"{colour}\"></polygon>",
            arrow_head(end.0, end.1)
        );
    }
    // Labels over the edges, each on a box that hides the lines beneath.
    for edge in &layout.edges {
        let r = edge.label;
        let text = layout::edge_label(machine, edge.transition);
        let colour = match edge.role {
            Role::Move => INK,
            Role::Done => DONE,
            Role::Failed => FAILED,
        };
        let _ = write!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\" fill=\"#ffffff\" \
             fill-opacity=\"0.92\"></rect>",
            n(r.x),
            n(r.y),
            n(r.w),
            n(r.h)
        );
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"{LABEL_PX}\" \
             fill=\"{colour}\">{}</text>",
            n(r.x + r.w / 2.0),
            n(r.y + LABEL_H - 5.0),
            escape(&text)
        );
    }
    for (s, state) in machine.states.iter().enumerate() {
        let b = layout.boxes[s];
        let terminal = terminal(machine, s);
        let (stroke, dash) = match state.in_flight {
            Some(_) => (IN_FLIGHT, " stroke-dasharray=\"6 3\""),
            None => (INK, ""),
        };
        let _ = write!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"8\" fill=\"#ffffff\" \
             stroke=\"{stroke}\" stroke-width=\"1.5\"{dash}></rect>",
            n(b.x),
            n(b.y),
            n(b.w),
            n(b.h)
        );
        if terminal {
            let _ = write!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"5\" fill=\"none\" \
                 stroke=\"{stroke}\" stroke-width=\"1\"></rect>",
                n(b.x + 3.5),
                n(b.y + 3.5),
                n(b.w - 7.0),
                n(b.h - 7.0)
            );
        }
        if state.initial {
            let (x, y) = (b.x + 14.0, b.y);
            let _ = write!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"6\" fill=\"{INK}\"></circle>",
                n(x),
                n(y - 26.0)
            );
            let _ = write!(
                out,
                "<path d=\"M{} {} L{} {}\" stroke=\"{INK}\" stroke-width=\"1.4\"></path>",
                n(x),
                n(y - 20.0),
                n(x),
                n(y - 7.0)
            );
            let _ = write!(
                out,
                "<polygon points=\"{}\" fill=\"{INK}\"></polygon>",
                arrow_head((x, y - 20.0), (x, y))
            );
        }
        let (name, db, badge) = layout::box_lines(machine, s);
        let cx = b.x + b.w / 2.0;
        centred(&mut out, cx, b.y + 19.0, NAME_PX, INK, true, &name);
        centred(&mut out, cx, b.y + 35.0, DB_PX, MUTED, false, &db);
        if let Some(badge) = badge {
            centred(&mut out, cx, b.y + 51.0, BADGE_PX, IN_FLIGHT, false, &badge);
        }
    }
    let mut x = LEGEND_X;
    for (text, colour) in items {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" font-size=\"{BADGE_PX}\" fill=\"{colour}\">{}</text>",
            n(x),
            n(layout.legend_y),
            escape(text)
        );
        x += layout::text_width(text, BADGE_PX) + LEGEND_GAP;
    }
    out.push_str("</svg>");
    out
}

/// One line of a box: `text`, escaped, centred on `x` with its baseline at
/// `y`.
fn centred(out: &mut String, x: f64, y: f64, px: f64, fill: &str, bold: bool, text: &str) {
    let weight = if bold { " font-weight=\"bold\"" } else { "" };
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"{px}\"{weight} \
         fill=\"{fill}\">{}</text>",
        n(x),
        n(y),
        escape(text)
    );
}

/// Where the legend starts, and the space after each of its items.
const LEGEND_X: f64 = 16.0;
const LEGEND_GAP: f64 = 18.0;

/// The legend: what the marks mean, those the machine uses.
fn legend_items(machine: &Diagram) -> Vec<(&'static str, &'static str)> {
    let mut items = vec![("● initial", LEGEND)];
    if (0..machine.states.len()).any(|s| terminal(machine, s)) {
        items.push(("double border: final", LEGEND));
    }
    if machine.states.iter().any(|s| s.in_flight.is_some()) {
        items.push(("dashed: in flight", IN_FLIGHT));
    }
    let roles = |role| {
        machine
            .transitions
            .iter()
            .any(|t| t.sources.iter().any(|&(_, r)| r == role))
    };
    if roles(Role::Done) {
        items.push(("→ done follow-up", DONE));
    }
    if roles(Role::Failed) {
        items.push(("→ failed follow-up", FAILED));
    }
    items
}

/// Whether no transition leaves `state`.
fn terminal(machine: &Diagram, state: usize) -> bool {
    !machine
        .transitions
        .iter()
        .any(|t| t.target != state && t.sources.iter().any(|&(s, _)| s == state))
}

/// The triangle of an arrow that ends at `tip`, coming from `from`.
fn arrow_head(from: (f64, f64), tip: (f64, f64)) -> String {
    let (dx, dy) = (tip.0 - from.0, tip.1 - from.1);
    let len = (dx * dx + dy * dy).sqrt().max(f64::EPSILON);
    let (ux, uy) = (dx / len, dy / len);
    let (bx, by) = (tip.0 - ux * 9.0, tip.1 - uy * 9.0);
    let (px, py) = (-uy * 4.5, ux * 4.5);
    format!(
        "{},{} {},{} {},{}",
        n(tip.0),
        n(tip.1),
        n(bx + px),
        n(by + py),
        n(bx - px),
        n(by - py)
    )
}

/// A coordinate, to a tenth of a pixel.
fn n(value: f64) -> String {
    let tenths = (value * 10.0).round() / 10.0;
    match tenths.fract() == 0.0 {
        true => format!("{tenths:.0}"),
        false => format!("{tenths:.1}"),
    }
}

/// `text` as XML character data or a double-quoted attribute's value:
/// `&`, `<`, `>` and `"` as entities, and every character XML 1.0 cannot
/// hold (control characters, U+FFFE, U+FFFF) written as Rust escapes it,
/// `\n` or `\u{1b}`, so that a name is shown as written in its source.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
