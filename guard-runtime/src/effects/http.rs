//! [`HttpEffect`]: the request an effect's row makes, sent with its
//! effect key, and its answer read as a verdict. Public as `crate::http`,
//! whose documentation holds the table of answers.

use core::future::Future;
use core::marker::PhantomData;
use core::time::Duration;
use std::sync::Arc;

use reqwest::header::{HeaderValue, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};

use crate::StateMachine;
use crate::dialect::BoxFuture;
use crate::effects::effect_fn::Effect;
use crate::effects::verdict::{PlainDone, PlainFailed, Retry, Verdict};

/// The header the effect key travels in.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How much of a refusal's body its reason keeps.
const REASON_BYTES: usize = 1024;

/// A refusal for good: a 4xx other than 409 and 429.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The status.
    pub status: StatusCode,
    /// The status and the start of the body (at most 1 KiB of it), as
    /// text: what a history note or a log line should say.
    pub reason: String,
    /// 422: the far side saw the effect key with other parameters.
    pub key_reused: bool,
}

/// What a 2xx and a refusal become, and any answer decided before the
/// table of the [module](crate::http). [`PlainAnswers`] is the default.
pub trait Answers<S>: Send + Sync + 'static {
    /// The verdict of a 2xx answer: `Verdict::done()`, or the `done`
    /// transition with a value read from `response`
    /// (`PayoutStatus::confirm(receipt.id).into()`).
    fn done(&self, response: Response) -> impl Future<Output = Verdict<S>> + Send;

    /// The verdict of a refusal for good: `Verdict::failed()`, or the
    /// `failed` transition with `refusal.reason` as its value or note.
    fn failed(&self, refusal: Refusal) -> Verdict<S>;

    /// A verdict for `response` that overrides the table, or `None` to
    /// let the table decide (the default).
    fn answer(&self, response: &Response) -> Option<Verdict<S>> {
        let _ = response;
        None
    }
}

/// The table as it stands: a 2xx is `Verdict::done()`, a refusal
/// `Verdict::failed()`. For a machine whose `done` and `failed` bind no
/// values.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainAnswers;

impl<S: PlainDone + PlainFailed + 'static> Answers<S> for PlainAnswers {
    async fn done(&self, _: Response) -> Verdict<S> {
        Verdict::done()
    }

    fn failed(&self, _: Refusal) -> Verdict<S> {
        Verdict::failed()
    }
}

/// An effect that sends the HTTP request `build` makes from each row,
/// with the effect key as its `Idempotency-Key`, and reads the answer as
/// the [module](crate::http)'s table says.
///
/// ```no_run
/// # use stateguard::{Effect, StateMachine};
/// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// # #[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64")]
/// # enum PayoutStatus {
/// #     #[state(initial)]
/// #     #[transition(start -> Sending)]
/// #     Pending,
/// #     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail,
/// #         retry(max = 8, backoff = "1s..5m", attempts = "attempts", next_attempt = "next_attempt_at")))]
/// #     #[transition(confirm -> Sent)]
/// #     #[transition(fail -> Failed)]
/// #     Sending,
/// #     Sent,
/// #     Failed,
/// # }
/// # async fn serve(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use std::time::Duration;
/// use stateguard::http::HttpEffect;
/// use stateguard::worker::Worker;
///
/// let client = reqwest::Client::builder()
///     .timeout(Duration::from_secs(10))
///     .build()
///     .expect("a client");
/// // The body is made from the row alone, so every attempt sends the same
/// // bytes under the same key.
/// let pay = HttpEffect::new(move |effect: &Effect<PayoutStatus, i64>| {
///     client
///         .post("https://bank.example/transfers")
///         .json(&serde_json::json!({ "payout": effect.key(), "amount": 100 }))
/// });
/// Worker::new(pool)
///     .effects(PayoutStatus::start(), 50, 32, pay.effect())
///     .run(std::future::pending())
///     .await?;
/// # Ok(()) }
/// ```
pub struct HttpEffect<S, K, B, A = PlainAnswers> {
    build: B,
    answers: A,
    row: PhantomData<fn(S, K)>,
}

impl<S, K, B, A> core::fmt::Debug for HttpEffect<S, K, B, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HttpEffect").finish_non_exhaustive()
    }
}

impl<S, K, B> HttpEffect<S, K, B, PlainAnswers>
where
    S: StateMachine,
    B: Fn(&Effect<S, K>) -> RequestBuilder,
{
    /// The effect that sends what `build` makes of each row, reading the
    /// answers as [`PlainAnswers`] does.
    pub fn new(build: B) -> Self {
        HttpEffect {
            build,
            answers: PlainAnswers,
            row: PhantomData,
        }
    }
}

impl<S, K, B, A> HttpEffect<S, K, B, A>
where
    S: StateMachine,
    B: Fn(&Effect<S, K>) -> RequestBuilder,
{
    /// The same effect, reading 2xx answers and refusals as `answers`
    /// says, and any answer it decides first.
    pub fn answers<A2: Answers<S>>(self, answers: A2) -> HttpEffect<S, K, B, A2> {
        HttpEffect {
            build: self.build,
            answers,
            row: PhantomData,
        }
    }
}

impl<S, K, B, A> HttpEffect<S, K, B, A>
where
    S: StateMachine,
    B: Fn(&Effect<S, K>) -> RequestBuilder,
    A: Answers<S>,
{
    /// Sends the request of `effect`'s row and reads its answer.
    pub async fn call(&self, effect: &Effect<S, K>) -> Verdict<S> {
        let request = (self.build)(effect).header(IDEMPOTENCY_KEY, effect.effect_key());
        match request.send().await {
            Ok(response) => self.read(response).await,
            Err(error) => {
                let reason = match error.is_timeout() {
                    true => format!("no answer within the timeout: {error}"),
                    false => format!("no answer: {error}"),
                };
                Retry::later().because(reason).into()
            }
        }
    }

    /// The verdict of `response`.
    async fn read(&self, response: Response) -> Verdict<S>
    where
        A: Answers<S>,
    {
        if let Some(verdict) = self.answers.answer(&response) {
            return verdict;
        }
        let status = response.status();
        if status.is_success() {
            return self.answers.done(response).await;
        }
        let retry = |reason: String| Retry::later().because(reason).into();
        let asked = || response.headers().get(RETRY_AFTER).and_then(retry_after);
        match status {
            StatusCode::CONFLICT => {
                let reason = format!("{status}: the first attempt is still running");
                match asked() {
                    Some(at) => at.because(reason).into(),
                    None => retry(reason),
                }
            }
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => match asked() {
                Some(at) => at.because(status.to_string()).into(),
                None => retry(status.to_string()),
            },
            _ if status.is_server_error() => retry(status.to_string()),
            _ if status.is_client_error() => {
                let body = response.bytes().await.unwrap_or_default();
                let body = String::from_utf8_lossy(&body[..body.len().min(REASON_BYTES)]);
                let key_reused = status == StatusCode::UNPROCESSABLE_ENTITY;
                let reason = format!("{status}: {body}");
                if key_reused {
                    tracing::error!(
                        %reason,
                        "the far side saw this effect key with other parameters: the request \
                         body changed between attempts; failing the row"
                    );
                } else {
                    tracing::warn!(%reason, "the far side refused the request; failing the row");
                }
                self.answers.failed(Refusal {
                    status,
                    reason,
                    key_reused,
                })
            }
            _ => {
                tracing::warn!(%status, "an answer that is neither 2xx, 4xx nor 5xx; retrying");
                retry(status.to_string())
            }
        }
    }

    /// The effect, as a worker's `effects`,
    /// [`finish_many`](crate::finish_many) and the rest take one.
    pub fn effect(self) -> impl Fn(Effect<S, K>) -> BoxFuture<'static, Verdict<S>> + Send + Sync
    where
        Self: Send + Sync + 'static,
        Effect<S, K>: Send + Sync + 'static,
    {
        let this = Arc::new(self);
        move |effect| {
            let this = this.clone();
            Box::pin(async move { this.call(&effect).await })
        }
    }
}

/// A `Retry-After` value: a number of seconds, or an HTTP date.
fn retry_after(value: &HeaderValue) -> Option<Retry> {
    let value = value.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Retry::after(Duration::from_secs(seconds)));
    }
    httpdate::parse_http_date(value).ok().map(Retry::at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let seconds = retry_after(&HeaderValue::from_static("120")).unwrap();
        assert_eq!(seconds.wait(), Some(Duration::from_secs(120)));
        let later = std::time::SystemTime::now() + Duration::from_secs(3600);
        let date = HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap();
        let wait = retry_after(&date).unwrap().wait().unwrap();
        assert!(wait > Duration::from_secs(3500) && wait <= Duration::from_secs(3600));
        assert!(retry_after(&HeaderValue::from_static("soon")).is_none());
    }
}
