//! The console's router: the machines it shows, its routes and their
//! handlers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Form, OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Router};
use maud::{Markup, html};
use sqlx::Pool;

use super::base::Base;
use super::markup::{
    StoresSeen, page, problem, row_page, said, section, state_page, stores_section, unread,
};
use super::shown::{ConsoleKey, Listed, PAGE_DEADLINE, PageError, Press, Pressed, Shown};
use super::token::{self, Operator, Origins, admit};
use crate::StateMachine;
use crate::dialect::Backend;
use crate::stores::Stores;
use crate::transition::rows::PAGE_ROWS;

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
    pub(super) stores: Option<&'static Stores>,
    pub(super) origins: Vec<String>,
}

impl<DB: Backend> core::fmt::Debug for Console<DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Console")
            .field("machines", &self.machines.len())
            .field("actions", &self.actions)
            .field("stores", &self.stores.map(|stores| stores.schema()))
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
            stores: None,
            origins: Vec::new(),
        }
    }

    /// The console, showing machine `S` too, whose keys are `K` (the key
    /// type its URLs are read as).
    pub fn machine<S: StateMachine, K: ConsoleKey<S, DB>>(mut self) -> Self {
        self.machines.push(Arc::new(Listed::<S, K>::new()));
        self
    }

    /// The console, showing the stores' tables too
    /// ([`Stores::search_path`], or a schema's, [`stores!`](crate::stores!)):
    /// the overview says how many messages wait in the outbox
    /// ([`outbox::backlog`](crate::outbox::backlog)) and how many
    /// idempotency keys are running
    /// ([`idempotency::running`](crate::idempotency::running)), and lists
    /// the outbox's dead letters, the messages a relay gave up on, up to
    /// [`PAGE_ROWS`](crate::PAGE_ROWS), oldest first, each with its topic,
    /// attempts and last error. With [`actions`](Console::actions) each
    /// dead letter has a button that [requeues](crate::outbox::requeue) it
    /// for the next relay pass, logged (`tracing`, at `info`) with the
    /// [`Operator`].
    ///
    /// [`Operator`]: super::Operator
    pub fn stores(mut self, stores: &'static Stores) -> Self {
        self.stores = Some(stores);
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
    /// `SameSite=Lax` cookie, from a page of the console's origin (its
    /// `Origin` names the host the request was sent to, or one named with
    /// [`Console::origin`]; without an `Origin`, its `Sec-Fetch-Site` says
    /// `same-origin`): a request from another site is refused with 403,
    /// as is one without an [`Operator`].
    /// Without this call no page has a form, and every `POST` is 405.
    ///
    /// A press is the move, then a read of the row for the page that
    /// answers it. If that read fails, the page still says what the move
    /// did, with the read's error beside it: a move that committed is
    /// never shown as a failure.
    ///
    /// [`Operator`]: super::Operator
    pub fn actions(mut self) -> Self {
        self.actions = true;
        self
    }

    /// The console, taking presses only from pages of `origin`, exactly
    /// as a browser sends it (`https://ops.example.com`; call again for
    /// more), in place of a page of the host the request was sent to.
    /// Name it where a proxy rewrites the `Host` the console sees, and
    /// where the service's authentication comes with the network (a VPN,
    /// an address allowlist) rather than with credentials the browser
    /// holds, so that a page of another name that resolves to the console
    /// (DNS rebinding) cannot press.
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
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
        let overview = get(overview::<DB>);
        let overview = match actions {
            true => overview.post(requeue::<DB>),
            false => overview,
        };
        Router::new()
            .route("/", overview)
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

/// `GET /[?requeued={id}]`: each machine, its diagram, and the rows in
/// each state; the outbox's dead letters. After a requeue (which
/// redirects here), what it did above the rest.
async fn overview<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let requeued = (query.get("requeued"))
        .filter(|_| console.actions && console.stores.is_some())
        .map(|id| {
            let text = format!("Requeued `{id}`: due at once, for the next relay pass.");
            (StatusCode::OK, said("requeued", text))
        });
    overview_page(&console, &base, &headers, requeued).await
}

/// The overview, with `said` above it: what a requeue did.
async fn overview_page<DB: Backend>(
    console: &Console<DB>,
    base: &Base,
    headers: &HeaderMap,
    said_: Option<(StatusCode, Markup)>,
) -> Response {
    // Every read of the page at once, so that the page answers within one
    // `PAGE_DEADLINE`, however many machines and stores it shows.
    let counted = futures_util::future::join_all(
        (console.machines.iter()).map(|machine| machine.counts(&console.pool)),
    );
    // A token only where a form needs one: a requeue button.
    let token = match (console.stores, console.actions) {
        (Some(_), true) => match token::token(headers) {
            Ok(token) => Some(token),
            Err(why) => return problem(base, PageError::Internal(why)),
        },
        _ => None,
    };
    let stores = async {
        let stores = console.stores?;
        let (outbox, keys) = (stores.outbox(), stores.idempotency());
        let pool = &console.pool;
        let (backlog, letters, running) = tokio::join!(
            outbox.backlog(pool).within(PAGE_DEADLINE),
            (outbox.dead_letters(pool, PAGE_ROWS as u32)).within(PAGE_DEADLINE),
            keys.running(pool).within(PAGE_DEADLINE),
        );
        Some(StoresSeen {
            outbox: outbox.table(),
            backlog,
            letters,
            keys: keys.table(),
            running,
        })
    };
    let (counted, seen) = tokio::join!(counted, stores);
    let sections = (console.machines.iter())
        .zip(counted)
        .map(|(machine, counts)| section(base, machine.as_ref(), counts));
    let outbox = seen.map(|seen| stores_section(base, seen, token.as_ref()));
    let (status, said_) = match said_ {
        Some((status, said_)) => (status, Some(said_)),
        None => (StatusCode::OK, None),
    };
    page(
        status,
        "Overview",
        base,
        html! {
            @if let Some(said_) = said_ { (said_) }
            @for section in sections { (section) }
            @if let Some(outbox) = outbox { (outbox) }
        },
        token.as_ref(),
    )
}

/// `POST /`: a dead letter's requeue button pressed. The form names the
/// message and carries the token. A requeue redirects to the overview
/// (`303 See Other`), so that reloading the page does not press again;
/// anything else answers with the page and what went wrong.
async fn requeue<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    operator: Option<Extension<Operator>>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let origins = Origins {
        named: &console.origins,
        authority: uri.authority().map(|a| a.as_str()),
    };
    let operator = match admit(&headers, &origins, &form, operator.map(|Extension(op)| op)) {
        Ok(operator) => operator,
        Err(why) => return problem(&base, PageError::Forbidden(why)),
    };
    let Some(outbox) = console.stores.map(Stores::outbox) else {
        return problem(
            &base,
            PageError::NotFound("the console shows no outbox".to_owned()),
        );
    };
    let Some(id) = form.get("requeue").filter(|id| !id.is_empty()) else {
        return problem(
            &base,
            PageError::BadRequest("the press names no message to requeue".to_owned()),
        );
    };
    let requeued = match outbox
        .requeue(&console.pool, id)
        .within(PAGE_DEADLINE)
        .await
    {
        Ok(requeued) => requeued,
        Err(error) => return problem(&base, PageError::Database(error)),
    };
    if requeued {
        tracing::info!(
            operator = operator.name(),
            message_id = id.as_str(),
            outbox = outbox.table(),
            "a dead letter requeued from the console"
        );
        return Redirect::to(&base.requeued(id)).into_response();
    }
    let text = format!("`{id}` is not a dead letter (any more). Nothing changed.");
    let said_ = (StatusCode::CONFLICT, said("not-dead", text));
    overview_page(&console, &base, &headers, Some(said_)).await
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

/// `GET /{machine}/rows/{key}[?moved={state}]`: one row. After a press
/// that moved it (which redirects here), what it did above the row.
async fn row<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    Path((machine, key)): Path<(String, String)>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
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
        Some(Err(why)) => return problem(&base, PageError::Internal(why)),
    };
    // Only a state of the machine's own, and only where buttons are on.
    let moved = (query.get("moved"))
        .filter(|_| console.actions)
        .and_then(|to| shown.variant(to))
        .map(Pressed::Moved);
    let said_ = moved.as_ref().map(|pressed| (StatusCode::OK, pressed));
    match (shown.row(&console.pool, &key).await, said_) {
        (Ok(row), said_) => row_page(&base, shown, &row, token.as_ref(), said_),
        // The move is done: a read that fails now must not hide it.
        (Err(error), Some((status, pressed))) => unread(&base, status, pressed, error),
        (Err(error), None) => problem(&base, error),
    }
}

/// `POST /{machine}/rows/{key}`: a button pressed. The form names the
/// transition, the occurrence the page showed, the token and a reason. A
/// press that moved the row redirects to the row's page (`303 See
/// Other`), which says so, so that reloading the page does not press
/// again; any other answer is the row's page with what the press found
/// (`409 Conflict` for a stale page, a conflict or a refusal).
async fn press<DB: Backend>(
    State(console): State<Arc<Console<DB>>>,
    base: Base,
    Path((machine, key)): Path<(String, String)>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    operator: Option<Extension<Operator>>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let forbidden = |why: String| problem(&base, PageError::Forbidden(why));
    let origins = Origins {
        named: &console.origins,
        authority: uri.authority().map(|a| a.as_str()),
    };
    let operator = match admit(&headers, &origins, &form, operator.map(|Extension(op)| op)) {
        Ok(operator) => operator,
        Err(why) => return forbidden(why),
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
        Pressed::Moved(to) => {
            return Redirect::to(&base.row_moved(shown.name(), &key, to)).into_response();
        }
        Pressed::AlreadyThere(_) => StatusCode::OK,
        Pressed::Stale(..) | Pressed::Conflict(_) | Pressed::Refused(_) => StatusCode::CONFLICT,
    };
    // The row as it is now, with what the press did above it.
    let token = match token::token(&headers) {
        Ok(token) => token,
        Err(why) => return problem(&base, PageError::Internal(why)),
    };
    // The move is done: a read that fails now must not hide it.
    match shown.row(&console.pool, &key).await {
        Ok(row) => row_page(&base, shown, &row, Some(&token), Some((status, &pressed))),
        Err(error) => unread(&base, status, &pressed, error),
    }
}
