//! An agent file's frontmatter is read as written: a block scalar's or a plain multi-line
//! scalar's lines are its text (a line holding a huge integer among them), values are never
//! coerced (an unquoted integer is no name, however large; a hex integer is never re-spelled
//! in decimal), an integer past 64 bits is its field's error beside the file's other field
//! errors (a trailing comment after a space or a tab changes nothing), anchors and merge keys
//! work, and a key given twice is an error naming the file.

use std::path::Path;

use agent_tree::prelude::*;
use agent_tree::{CatalogError, parse_agent_file};

use crate::support::agent_files::{fields_of, parse};

const HUGE: &str = "123456789012345678901234567890";

/// A malformed agent file's error names the file and the field, and every field error of a
/// file is reported: an integer one past u64 (a valid YAML integer) is an error of its field
/// beside the file's other field errors, never a file-wide "invalid YAML".
#[test]
fn an_integer_past_u64_is_a_field_error_of_that_field() {
    let text = "---\nmax_turns: 18446744073709551616\nisolated: maybe\n---\nYou work.\n";
    let err = parse_agent_file(Path::new("agents/big.md"), text).expect_err("refused");
    let errors: Vec<&CatalogError> = match &err {
        CatalogError::Many(errors) => errors.iter().collect(),
        one => vec![one],
    };
    let fields: Vec<&str> = errors
        .iter()
        .filter_map(|e| match e {
            CatalogError::Field { field, .. } => Some(field.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        fields,
        ["max_turns", "isolated"],
        "an out-of-range integer is not reported as its field's error (and hides the other \
         fields' errors): {err}"
    );
}

/// A YAML block scalar is a string taken verbatim ("`description` | a string, trimmed";
/// "Values are never coerced"): a description line `limit: <integer past u64>` is kept as
/// the file writes it, never quoted.
#[test]
fn a_block_scalar_line_holding_a_huge_integer_is_kept_as_written() {
    let text = "---\ndescription: |\n  limit: 123456789012345678901234567890\n---\nYou work.\n";
    let definition = parse_agent_file(Path::new("w.md"), text).unwrap();
    assert_eq!(
        definition.description,
        "limit: 123456789012345678901234567890"
    );
}

/// An integer no YAML value holds, followed by a YAML comment, is still its field's error
/// beside the file's other field errors (every file's errors are reported together).
#[test]
fn a_huge_integer_followed_by_a_comment_is_a_field_error_beside_the_others() {
    let text =
        "---\nmax_turns: 123456789012345678901234567890 # many\nisolated: maybe\n---\nYou work.\n";
    let err = parse_agent_file(Path::new("w.md"), text).unwrap_err();
    let CatalogError::Many(problems) = &err else {
        panic!("both field errors should be reported, got {err:?}: {err}");
    };
    let fields: Vec<&str> = problems
        .iter()
        .filter_map(|p| match p {
            CatalogError::Field { field, .. } => Some(field.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(fields, ["max_turns", "isolated"], "{err}");
}

/// The lines of a block scalar are its text, kept as written, also when the node carries a
/// tag or an anchor before its block indicator (`description: !!str |`, `description: &d |`).
#[test]
fn a_tagged_or_anchored_block_scalar_is_kept_as_written() {
    for opener in ["!!str |", "&d |"] {
        let definition = parse(&format!("description: {opener}\n  {HUGE}")).unwrap();
        assert_eq!(definition.description, HUGE, "{opener}");
    }
}

/// A valid file is read as written: a plain multi-line description whose continuation line
/// is digits is that text, the digits unquoted.
#[test]
fn a_plain_multi_line_description_is_kept_as_written() {
    let definition = parse(&format!("description: this is\n  {HUGE}\n  more")).unwrap();
    assert_eq!(definition.description, format!("this is {HUGE} more"));
}

/// A huge integer value with a trailing comment separated by a tab (YAML separates a
/// comment from a value by any white space) is its field's error beside the file's other
/// field errors.
#[test]
fn a_huge_integer_before_a_tab_and_a_comment_is_a_field_error() {
    let err = parse(&format!("max_turns: {HUGE}\t# many\nisolated: maybe")).unwrap_err();
    let mut fields = fields_of(&err);
    fields.sort();
    assert_eq!(fields, ["isolated", "max_turns"], "{err}");
}

/// An integer past 64 bits is read as the float YAML reads one past 128 bits as, so 30 and
/// 40 digits read alike: a number (never a string), its field's error naming the field.
#[test]
fn integers_past_64_bits_read_alike_as_a_number_whatever_their_length() {
    for digits in [
        "123456789012345678901234567890",
        "1234567890123456789012345678901234567890",
    ] {
        let err = parse(&format!("max_turns: {digits}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_turns"), "{err}");
        assert!(err.contains("found 1.23456789012345"), "{err}");
        let err = parse(&format!("tools: [{digits}]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tools"), "{err}");
    }
}

/// Values are never coerced: `tools: [0xFFFFFFFFFFFFFFFFFFFF]` is either refused (a number,
/// as `tools: [12]` is) or read as what the file wrote, never a name re-spelled in decimal.
#[test]
fn a_huge_hex_integer_is_not_re_spelled_as_a_decimal_name() {
    let read = parse("tools: [0xFFFFFFFFFFFFFFFFFFFF, read]");
    match read {
        Err(_) => {}
        Ok(d) => assert_eq!(
            d.tools,
            ToolSet::only(["0xFFFFFFFFFFFFFFFFFFFF", "read"]),
            "a tool list holding a name the file never wrote"
        ),
    }
}

/// Values are never coerced: `name` is a non-blank string, and an unquoted integer is
/// refused as `name: 12` is, however large.
#[test]
fn a_huge_integer_name_is_refused_as_a_small_one_is() {
    assert!(
        parse("name: 12").is_err(),
        "precondition: a number is no name"
    );
    let huge = parse("name: 123456789012345678901234567890");
    assert!(
        huge.is_err(),
        "an unquoted integer became a name: {:?}",
        huge.map(|d| d.name)
    );
}

/// Anchors and merge keys work, a key given twice is an error, and every problem names the
/// file; a huge integer within 128 bits is its field's error beside the others.
#[test]
fn merge_keys_work_and_duplicates_and_huge_integers_are_errors_naming_the_file() {
    let merged = parse("base: &b {max_turns: 3, description: d}\n<<: *b\nmax_turns: 4").unwrap();
    assert_eq!(
        (merged.max_turns, merged.description.as_str()),
        (Some(4), "d")
    );
    for frontmatter in ["x: {a: 1, a: 2}", "max_turns: 1\nmax_turns: 2", "<<: [3]"] {
        let err = parse(frontmatter).unwrap_err().to_string();
        assert!(err.contains("agents/lead.md"), "{frontmatter:?}: {err}");
    }
    let err = parse("max_turns: -123456789012345678901234567890\nisolated: yes")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_turns") && err.contains("isolated"),
        "{err}"
    );
}
