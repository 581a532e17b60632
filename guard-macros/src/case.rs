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
