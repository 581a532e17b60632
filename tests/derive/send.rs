//! The futures of the effect calls are `Send` in code generic over the
//! machine, the key, the database and the effect, as they were when the
//! calls were `async fn`s with the bounds spelled out: code of one's own
//! that wraps them can still hand them to `tokio::spawn`. Compiled, never
//! run: it fails to build if a future stops being `Send`.

#![allow(dead_code)]

use stateguard::bounds::{Claimable, FinishFn, FinishFnOnce};
use stateguard::{Backend, Runner, StateMachine, Transition, Won};

fn send<T: Send>(value: T) -> T {
    value
}

fn finish<S, K, E, F>(won: Won<S, K>, executor: E, effect: F)
where
    S: StateMachine,
    E: Runner<Commit = stateguard::Committed>,
    F: FinishFnOnce<S, K, E::Database>,
{
    drop(send(won.finish(executor, effect)));
}

fn finish_many<S, K, DB, F>(pool: &sqlx::Pool<DB>, wins: Vec<Won<S, K>>, effect: F)
where
    DB: Backend,
    F: FinishFn<S, K, DB>,
{
    drop(send(stateguard::finish_many(pool, wins, 4, effect)));
}

fn recover_many<S, K, DB, F>(pool: &sqlx::Pool<DB>, state: S, effect: F)
where
    DB: Backend,
    F: FinishFn<S, K, DB>,
{
    drop(send(stateguard::recover_many(pool, state, 10, 4, effect)));
}

fn recover<S, K, E, F>(executor: E, state: S, effect: F)
where
    E: Runner<Commit = stateguard::Committed> + 'static,
    F: FinishFn<S, K, E::Database> + 'static,
{
    use core::future::IntoFuture;
    drop(send(
        stateguard::recover(executor, state, 10, effect).into_future(),
    ));
}

fn claim<S, K, DB>(pool: &sqlx::Pool<DB>, claim: Transition<S>)
where
    DB: stateguard::bounds::Batched,
    S: Claimable<K, DB>,
{
    drop(send(claim.claim(pool, 10)));
}
