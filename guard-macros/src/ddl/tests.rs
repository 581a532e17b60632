//! The file layout and the dollar quotes of the generated DDL.

use super::*;

#[test]
fn dollar_tags_avoid_the_body() {
    assert_eq!(dollar_tag("BEGIN END"), "$stateguard$");
    assert_eq!(dollar_tag("'$stateguard$'"), "$stateguard_1$");
    assert_eq!(
        dollar_tag("'$stateguard$' '$stateguard_1$'"),
        "$stateguard_2$"
    );
}

#[test]
fn a_file_is_a_header_and_terminated_statements() {
    let header = ["one".to_owned(), "two".to_owned()];
    let statements = ["SELECT 1".to_owned(), "SELECT\n2".to_owned()];
    assert_eq!(
        file(&header, &statements),
        "-- one\n-- two\n\nSELECT 1;\n\nSELECT\n2;\n"
    );
}
