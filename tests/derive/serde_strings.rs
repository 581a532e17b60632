//! With the `serde` feature a machine's enum serializes as its database
//! strings, as a JSON API returns them, and a string that is no state is
//! an error that names it.

use serde::{Deserialize, Serialize};
use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "payouts",
    column = "status",
    key = "id",
    rename_all = "SCREAMING_SNAKE_CASE"
)]
enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> InFlight)]
    Pending,
    #[state(rename = "sending")]
    InFlight,
}

/// A response body as an API would write it.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Payout {
    id: i64,
    status: PayoutStatus,
}

#[test]
fn states_are_their_database_strings_in_json() {
    let body = Payout {
        id: 7,
        status: PayoutStatus::Pending,
    };
    let json = serde_json::to_string(&body).unwrap();
    assert_eq!(json, r#"{"id":7,"status":"PENDING"}"#);
    assert_eq!(serde_json::from_str::<Payout>(&json).unwrap(), body);
    // A renamed state, and an escaped string the deserializer cannot lend.
    assert_eq!(
        serde_json::from_str::<PayoutStatus>(r#""sending""#).unwrap(),
        PayoutStatus::InFlight
    );
    assert_eq!(
        serde_json::from_str::<PayoutStatus>(r#""\u0073ending""#).unwrap(),
        PayoutStatus::InFlight
    );
}

#[test]
fn a_string_that_is_no_state_is_refused_with_its_text() {
    let error = serde_json::from_str::<PayoutStatus>(r#""InFlight""#).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("InFlight"), "{message}");
    assert!(message.contains("PayoutStatus"), "{message}");
    // Not a string at all.
    let error = serde_json::from_str::<PayoutStatus>("3").unwrap_err();
    assert!(
        error.to_string().contains("a state's database string"),
        "{error}"
    );
}
