//! The console's router: the machines it shows, its routes and their
//! handlers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use maud::html;
use sqlx::Pool;

use super::markup::{Base, page, problem, row_page, section, state_page};
use super::shown::{ConsoleKey, Listed, PageError, Press, Pressed, Shown};
use super::token::{self, Operator, cookie, same_origin, same_token};
use crate::StateMachine;
use crate::dialect::Backend;

/// The console for the machines on one pool. [`Console::machine`] adds a
/// machine; [`Console::actions`] turns on the buttons that move rows;
/// [`Console::router`] makes the router to mount.
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
/// let console = Console::new(pool).machine::<PayoutStatus, i64>();
/// let app: Router = Router::new().nest("/ops", console.router());
/// # let _ = app;
/// # }
/// ```
pub struct Console<DB: Backend> {
    pub(super) pool: Pool<DB>,
    pub(super) machines: Vec<Arc<dyn Shown<DB>>>,
    pub(super) actions: bool,
}

impl<DB: Backend> core::fmt::Debug for Console<DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Console")
            .field("machines", &self.machines.len())
            .field("actions", &self.actions)
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> Console<DB> {
    /// A console with no machines yet, reading through `pool`, with
    /// actions off.
    pub fn new(pool: Pool<DB>) -> Self {
        Console {
            pool,
            machines: Vec::new(),
            actions: false,
        }
    }

    /// The console, showing machine `S` too, whose keys are `K` (the key
    /// type its URLs are read as).
    pub fn machine<S: StateMachine, K: ConsoleKey<S, DB>>(mut self) -> Self {
        self.machines.push(Arc::new(Listed::<S, K>::new()));
        self
    }

    /// The console, with buttons that move rows: each transition a row's
    /// state allows and the console can apply (one without values, of a
    /// machine with a `version` column and a history table) is a button
    /// on the row's page. A press applies it
    /// [`expecting`](crate::Transition::expecting) the occurrence the page
    /// showed, so a page older than the row answers `Stale` and moves
    /// nothing, and notes it in the history with the [`Operator`] the
    /// service's authentication put in the request, and the reason typed.
    ///
    /// A press is a `POST` of a form that carries a token also set as a
    /// `SameSite=Strict` cookie, from a page of the same origin (its
    /// `Origin`, or else its `Sec-Fetch-Site`): a request from another
    /// site is refused with 403, as is one without an [`Operator`].
    /// Without this call no page has a form, and every `POST` is 405.
    ///
    /// [`Operator`]: super::Operator
    pub fn actions(mut self) -> Self {
        self.actions = true;
        self
    }

    /// The router to mount (`Router::new().nest("/ops", console.router())`).
    pub fn router<T: Clone + Send + Sync + 'static>(self) -> Router<T> {
        let actions = self.actions;
        let shared = Arc::new(self);
        let row = get(row::<DB>);
        let row = match actions {
            true => row.post(press::<DB>),
            false => row,
        };
        Router::new()
            .route("/", get(overview::<DB>))
            .route("/{machine}/states/{state}", get(state::<DB>))
            .route("/{machine}/rows/{key}", row)
            .with_state(shared)
    }

    /// The machine named `name`.
    pub(super) fn find(&self, name: &str) -> Option<&dyn Shown<DB>> {
        self.machines
            .iter()
            .find(|machine| machine.name() == name)
            .map(|machine| machine.as_ref())
    }
}

/// `GET /`: each machine, its diagram, and the rows in each state.
async fn overview<DB: Backend>(State(console): State<Arc<Console<DB>>>, base: Base) -> Response {
    let mut sections = Vec::with_capacity(console.machines.len());
    for machine in &console.machines {
        let counts = machine.counts(&console.pool).await;
        sections.push(section(&base, machine.as_ref(), counts));
    }
    page(
        StatusCode::OK,
        "Overview",
        &base,
        html! { @for section in sections { (section) } },
        None,
    )
}

/// `GET /{machine}/states/{state}?after={key}`: a page of the rows in a
/// state.
async fn state<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    Path((machine, state)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(shown) = console.find(&machine) else {
        return problem(
            &base,
            PageError::NotFound(format!("no machine `{machine}`")),
        );
    };
    let after = query.get("after").map(String::as_str);
    match shown.rows(&console.pool, &state, after).await {
        Ok(page) => state_page(&base, shown, &page, after.is_some()),
        Err(error) => problem(&base, error),
    }
}

/// `GET /{machine}/rows/{key}`: one row.
async fn row<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    Path((machine, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Some(shown) = console.find(&machine) else {
        return problem(
            &base,
            PageError::NotFound(format!("no machine `{machine}`")),
        );
    };
    let token = match console.actions.then(|| token::token(&headers)) {
        None => None,
        Some(Ok(token)) => Some(token),
        Some(Err(why)) => return problem(&base, PageError::Forbidden(why)),
    };
    match shown.row(&console.pool, &key).await {
        Ok(row) => row_page(&base, shown, &row, token.as_ref(), None),
        Err(error) => problem(&base, error),
    }
}

/// `POST /{machine}/rows/{key}`: a button pressed. The form names the
/// transition, the occurrence the page showed, the token and a reason.
async fn press<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    Path((machine, key)): Path<(String, String)>,
    headers: HeaderMap,
    operator: Option<Extension<Operator>>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let forbidden = |why: String| problem(&base, PageError::Forbidden(why));
    if let Err(why) = same_origin(&headers) {
        return forbidden(why);
    }
    let held = cookie(&headers);
    let sent = form.get("token");
    match (held, sent) {
        (Some(held), Some(sent)) if same_token(&held, sent) => {}
        _ => return forbidden("the press carries no token of the console's page".to_owned()),
    }
    let Some(Extension(operator)) = operator else {
        return forbidden(
            "no operator: the service's authentication puts a `console::Operator` in the request"
                .to_owned(),
        );
    };
    let Some(shown) = console.find(&machine) else {
        return problem(
            &base,
            PageError::NotFound(format!("no machine `{machine}`")),
        );
    };
    let field = |name: &str| form.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let Some(transition) = field("transition") else {
        return problem(
            &base,
            PageError::BadRequest("the press names no transition".to_owned()),
        );
    };
    let occurrence = match field("occurrence").map(str::parse::<i64>) {
        Some(Ok(occurrence)) => occurrence,
        _ => {
            return problem(
                &base,
                PageError::BadRequest("the press names no occurrence (an integer)".to_owned()),
            );
        }
    };
    let press = Press {
        transition: transition.to_owned(),
        occurrence,
        operator: operator.name().to_owned(),
        reason: field("reason").map(str::to_owned),
    };
    let pressed = match shown.press(&console.pool, &key, press).await {
        Ok(pressed) => pressed,
        Err(error) => return problem(&base, error),
    };
    let status = match pressed {
        Pressed::Moved(_) | Pressed::AlreadyThere(_) => StatusCode::OK,
        Pressed::Stale(..) | Pressed::Conflict(_) | Pressed::Refused(_) => StatusCode::CONFLICT,
    };
    // The row as it is now, with what the press did above it.
    let token = match token::token(&headers) {
        Ok(token) => token,
        Err(why) => return forbidden(why),
    };
    match shown.row(&console.pool, &key).await {
        Ok(row) => row_page(&base, shown, &row, Some(&token), Some((status, &pressed))),
        Err(error) => problem(&base, error),
    }
}
