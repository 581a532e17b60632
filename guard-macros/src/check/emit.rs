//! `emit(…)`: the topic a winning move's message goes to and the columns
//! its payload holds.

use syn::ext::IdentExt;

use crate::attr::EmitAttr;
use crate::ctxt::Ctxt;
use crate::ident;
use crate::model::Emit;

/// The longest topic: what brokers' subjects and routing keys commonly
/// accept.
const MAX_TOPIC: usize = 255;

/// A topic is dot-separated words of ASCII letters, digits, `_` and `-`
/// (`payout.sent`): a NATS subject without wildcards, a Kafka topic, a
/// RabbitMQ routing key. It is written into the statement as a literal, so
/// nothing else may pass.
fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("is empty".to_owned());
    }
    if topic.len() > MAX_TOPIC {
        return Err(format!("is longer than {MAX_TOPIC} characters"));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "holds {}; a topic is words of ASCII letters, digits, `_` and `-` joined by dots",
            ident::describe(c)
        ));
    }
    if topic.split('.').any(str::is_empty) {
        return Err(
            "has an empty word: it starts or ends with a dot, or has two in a row".to_owned(),
        );
    }
    Ok(())
}

/// The checked `emit`: a valid topic and payload columns that are valid,
/// distinct and not the key's (the payload always holds those).
pub(super) fn check_emit(cx: &mut Ctxt, attr: &EmitAttr, key: &[String]) -> Option<Emit> {
    let mut ok = true;
    let topic = attr.topic.value();
    if let Err(why) = check_topic(&topic) {
        ok = false;
        cx.error(&attr.topic, format!("topic {topic:?} {why}"));
    }
    let mut payload: Vec<String> = Vec::new();
    for (i, column) in attr.payload.iter().enumerate() {
        let name = column.unraw().to_string();
        if let Err(why) = ident::check_ident(&name) {
            ok = false;
            cx.error(
                column,
                format!("payload column {name:?} is not a valid SQL identifier: it {why}"),
            );
        } else if let Some(first) = attr.payload[..i]
            .iter()
            .find(|c| c.unraw().to_string().eq_ignore_ascii_case(&name))
        {
            ok = false;
            cx.duplicate(
                column,
                format!("payload column `{name}` is listed twice"),
                first,
                "first listed here",
            );
        } else if key.iter().any(|k| k.eq_ignore_ascii_case(&name)) {
            ok = false;
            cx.error(
                column,
                format!(
                    "`{name}` is a key column, which every payload holds already; leave it out"
                ),
            );
        } else {
            payload.push(name);
        }
    }
    ok.then_some(Emit { topic, payload })
}

#[cfg(test)]
mod tests {
    use super::check_topic;

    #[test]
    fn topics() {
        assert_eq!(check_topic("payout.sent"), Ok(()));
        assert_eq!(check_topic("orders_v2.created-eu"), Ok(()));
        for bad in [
            "",
            "payout.",
            ".payout",
            "payout..sent",
            "payout.*",
            "payout.>",
            "pay out",
            "it's",
            "é",
        ] {
            assert!(check_topic(bad).is_err(), "{bad:?} passed");
        }
        assert!(check_topic(&"a".repeat(256)).is_err());
    }
}
