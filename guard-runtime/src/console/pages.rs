//! The console's router and its pages.

use core::time::Duration;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use sqlx::Pool;

use crate::StateMachine;
use crate::dialect::{Backend, BoxFuture};
use crate::docs;
use crate::error::Error;
use crate::transition::counts::COUNT_CAP;

/// How long a page's reads may take in all before the page shows their
/// error instead.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(5);

/// The console for the machines on one pool. [`Console::machine`] adds a
/// machine; [`Console::router`] makes the router to mount.
///
/// ```
/// use axum::Router;
/// use stateguard::StateMachine;
/// use stateguard::console::Console;
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(start -> Sent)]
///     Pending,
///     Sent,
/// }
///
/// # async fn run(pool: sqlx::SqlitePool) {
/// // Behind the service's own authentication, under a path of its choosing.
/// let app: Router = Router::new().nest("/ops", Console::new(pool).machine::<PayoutStatus>().router());
/// # let _ = app;
/// # }
/// ```
pub struct Console<DB: Backend> {
    pool: Pool<DB>,
    machines: Vec<Arc<dyn Shown<DB>>>,
}

impl<DB: Backend> core::fmt::Debug for Console<DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Console")
            .field("machines", &self.machines.len())
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> Console<DB> {
    /// A console with no machines yet, reading through `pool`.
    pub fn new(pool: Pool<DB>) -> Self {
        Console {
            pool,
            machines: Vec::new(),
        }
    }

    /// The console, showing machine `S` too.
    pub fn machine<S: StateMachine>(mut self) -> Self {
        self.machines.push(Arc::new(Listed::<S> {
            svg: docs::svg::<S>(),
            machine: core::marker::PhantomData,
        }));
        self
    }

    /// The router to mount (`Router::new().nest("/ops", console.router())`).
    /// It answers `GET /` with the overview.
    pub fn router<T: Clone + Send + Sync + 'static>(self) -> Router<T> {
        let shared = Arc::new(self);
        Router::new()
            .route("/", get(overview::<DB>))
            .with_state(shared)
    }
}

/// A machine as the console shows it, whatever its type.
trait Shown<DB: Backend>: Send + Sync {
    /// The machine's name.
    fn name(&self) -> &'static str;

    /// Its table.
    fn table(&self) -> &'static str;

    /// Its diagram, as SVG.
    fn svg(&self) -> &str;

    /// The rows in each state: its name, its database string, how many
    /// rows (up to [`COUNT_CAP`]) and whether there are more.
    fn counts<'a>(&'a self, pool: &'a Pool<DB>) -> BoxFuture<'a, Result<Vec<Count>, Error>>;
}

/// The rows of one state.
struct Count {
    variant: &'static str,
    db: &'static str,
    rows: u64,
    more: bool,
}

/// Machine `S`, as the console lists it.
struct Listed<S> {
    svg: String,
    machine: core::marker::PhantomData<fn() -> S>,
}

impl<DB: Backend, S: StateMachine> Shown<DB> for Listed<S> {
    fn name(&self) -> &'static str {
        S::MACHINE.name()
    }

    fn table(&self) -> &'static str {
        S::MACHINE.table()
    }

    fn svg(&self) -> &str {
        &self.svg
    }

    fn counts<'a>(&'a self, pool: &'a Pool<DB>) -> BoxFuture<'a, Result<Vec<Count>, Error>> {
        Box::pin(async move {
            let counts = S::MACHINE.counts(pool).within(PAGE_DEADLINE).await?;
            Ok(counts
                .into_iter()
                .map(|count| {
                    let state = S::MACHINE.state(count.state);
                    Count {
                        variant: state.map_or("", |s| s.variant()),
                        db: count.state.as_str(),
                        rows: count.rows,
                        more: count.more,
                    }
                })
                .collect())
        })
    }
}

/// `GET /`: each machine, its diagram, and the rows in each state.
async fn overview<DB: Backend>(State(console): State<Arc<Console<DB>>>) -> Response {
    let mut sections = Vec::with_capacity(console.machines.len());
    for machine in &console.machines {
        let counts = machine.counts(&console.pool).await;
        sections.push(section(machine.as_ref(), counts));
    }
    page(
        "Overview",
        html! {
            @for section in sections { (section) }
        },
    )
}

/// One machine's part of the overview.
fn section<DB: Backend>(machine: &dyn Shown<DB>, counts: Result<Vec<Count>, Error>) -> Markup {
    html! {
        section.machine data-machine=(machine.name()) {
            h2 { (machine.name()) }
            p.table { "Table " code { (machine.table()) } }
            div.diagram { (PreEscaped(machine.svg())) }
            @match counts {
                Ok(counts) => {
                    table.counts {
                        thead { tr { th { "state" } th { "stored as" } th.rows { "rows" } } }
                        tbody {
                            @for count in counts {
                                tr data-state=(count.db) data-rows=(count.rows) data-more=(count.more) {
                                    td { (count.variant) }
                                    td { code { (count.db) } }
                                    td.rows {
                                        (count.rows)
                                        @if count.more { "+" }
                                    }
                                }
                            }
                        }
                    }
                    p.cap { "Each state is counted up to " (COUNT_CAP) " rows." }
                }
                Err(error) => {
                    p.error role="alert" { "The rows could not be counted: " (error) }
                }
            }
        }
    }
}

/// A whole page: its title, a small style sheet, and `body`.
fn page(title: &str, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · stateguard" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header { h1 { "stateguard · " (title) } }
                main { (body) }
            }
        }
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
                 frame-ancestors 'none'; form-action 'self'",
            ),
        ],
        markup.into_string(),
    )
        .into_response()
}

/// The console's looks: system fonts, a table per machine.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1f2328}\
header{background:#1f2328;color:#fff;padding:.6rem 1.2rem}header h1{font-size:1.1rem;margin:0}\
main{padding:1rem 1.2rem}section.machine{margin-bottom:2.5rem}\
.diagram svg{max-width:100%;height:auto}table.counts{border-collapse:collapse;margin-top:.8rem}\
table.counts th,table.counts td{border-bottom:1px solid #d0d7de;padding:.3rem .8rem;text-align:left}\
td.rows,th.rows{text-align:right}.error{color:#b42318}.cap{color:#57606a;font-size:.85rem}";
