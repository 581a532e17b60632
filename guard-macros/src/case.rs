//! `rename_all` rules, spelled as serde spells them.

use self::RenameRule::*;

// The names follow serde's `rename_all` rules.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RenameRule {
    LowerCase,
    UpperCase,
    PascalCase,
    CamelCase,
    SnakeCase,
    ScreamingSnakeCase,
    KebabCase,
    ScreamingKebabCase,
}

const RULES: &[(&str, RenameRule)] = &[
    ("lowercase", LowerCase),
    ("UPPERCASE", UpperCase),
    ("PascalCase", PascalCase),
    ("camelCase", CamelCase),
    ("snake_case", SnakeCase),
    ("SCREAMING_SNAKE_CASE", ScreamingSnakeCase),
    ("kebab-case", KebabCase),
    ("SCREAMING-KEBAB-CASE", ScreamingKebabCase),
];

impl RenameRule {
    pub fn from_str(rule: &str) -> Option<Self> {
        RULES
            .iter()
            .find(|(name, _)| *name == rule)
            .map(|(_, r)| *r)
    }

    pub fn names() -> String {
        let names: Vec<String> = RULES
            .iter()
            .map(|(name, _)| format!("\"{name}\""))
            .collect();
        names.join(", ")
    }

    /// Applies the rule to a PascalCase variant name.
    pub fn apply(self, variant: &str) -> String {
        match self {
            PascalCase => variant.to_owned(),
            LowerCase => variant.to_ascii_lowercase(),
            UpperCase => variant.to_ascii_uppercase(),
            CamelCase => {
                let mut chars = variant.chars();
                match chars.next() {
                    Some(first) => first.to_lowercase().chain(chars).collect(),
                    None => String::new(),
                }
            }
            SnakeCase => {
                let mut snake = String::new();
                for (i, ch) in variant.char_indices() {
                    if i > 0 && ch.is_uppercase() {
                        snake.push('_');
                    }
                    snake.extend(ch.to_lowercase());
                }
                snake
            }
            ScreamingSnakeCase => SnakeCase.apply(variant).to_uppercase(),
            KebabCase => SnakeCase.apply(variant).replace('_', "-"),
            ScreamingKebabCase => ScreamingSnakeCase.apply(variant).replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RenameRule::{self, *};

    #[test]
    fn every_rule_on_every_shape_of_name() {
        // variant, lower, UPPER, Pascal, camel, snake, SCREAMING, kebab, SCREAMING-KEBAB
        for &(variant, lower, upper, camel, snake, screaming, kebab, screaming_kebab) in &[
            (
                "Pending", "pending", "PENDING", "pending", "pending", "PENDING", "pending",
                "PENDING",
            ),
            (
                "OnHold", "onhold", "ONHOLD", "onHold", "on_hold", "ON_HOLD", "on-hold", "ON-HOLD",
            ),
            (
                "SentToBank",
                "senttobank",
                "SENTTOBANK",
                "sentToBank",
                "sent_to_bank",
                "SENT_TO_BANK",
                "sent-to-bank",
                "SENT-TO-BANK",
            ),
            ("A", "a", "A", "a", "a", "A", "a", "A"),
            (
                "Step2", "step2", "STEP2", "step2", "step2", "STEP2", "step2", "STEP2",
            ),
        ] {
            assert_eq!(LowerCase.apply(variant), lower);
            assert_eq!(UpperCase.apply(variant), upper);
            assert_eq!(PascalCase.apply(variant), variant);
            assert_eq!(CamelCase.apply(variant), camel);
            assert_eq!(SnakeCase.apply(variant), snake);
            assert_eq!(ScreamingSnakeCase.apply(variant), screaming);
            assert_eq!(KebabCase.apply(variant), kebab);
            assert_eq!(ScreamingKebabCase.apply(variant), screaming_kebab);
        }
    }

    #[test]
    fn non_ascii_letters_change_case_too() {
        assert_eq!(SnakeCase.apply("ÉtatFinal"), "état_final");
        assert_eq!(CamelCase.apply("État"), "état");
    }

    #[test]
    fn rules_are_named_as_serde_names_them() {
        for name in [
            "lowercase",
            "UPPERCASE",
            "PascalCase",
            "camelCase",
            "snake_case",
            "SCREAMING_SNAKE_CASE",
            "kebab-case",
            "SCREAMING-KEBAB-CASE",
        ] {
            assert!(RenameRule::from_str(name).is_some(), "{name}");
            assert!(
                RenameRule::names().contains(&format!("\"{name}\"")),
                "{name}"
            );
        }
        assert!(RenameRule::from_str("snake-case").is_none());
        assert!(RenameRule::from_str("").is_none());
    }
}
