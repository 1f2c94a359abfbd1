//! The one rule for a name that becomes a path component: a dense model's directory in an
//! index (`dense/NAME/`), a benchmark topic's directories (`topics/TOPIC/`, `runs/TOPIC/`, and
//! the subdirectory of a local `--queries DIR`). A name that passes is exactly one plain
//! component, so joining it to a directory never leaves that directory.

use crate::error::{Error, Result, Setting};

/// Whether `name` is one plain path component: not empty, only ASCII letters, digits, `.`, `_`
/// and `-` (no separator, no NUL, nothing a shell or a URL would change), and neither `.` nor
/// `..` (which name the directory itself or its parent).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// [`is_plain_name`] as an invalid-argument error for the setting `what` (the command line
/// turns a setting into the flag the user typed).
pub fn check_plain_name(what: Setting, name: &str) -> Result<()> {
    if is_plain_name(name) {
        Ok(())
    } else if name == "." || name == ".." {
        Err(Error::invalid(
            what,
            format!("{name:?} names a directory, not a name of its own"),
        ))
    } else {
        Err(Error::invalid(
            what,
            format!("{name:?}: use letters, digits, '.', '_' and '-'"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_plain_component_is_a_name() {
        for good in [
            "langchain",
            "all-MiniLM-L6-v2",
            "v1.5",
            "a_b",
            "...",
            ".hidden",
        ] {
            assert!(is_plain_name(good), "{good:?}");
            check_plain_name(Setting::Topic, good).unwrap();
        }
        for bad in [
            "", ".", "..", "a/b", "../x", "/abs", "a\\b", "a b", "a\0b", "é",
        ] {
            assert!(!is_plain_name(bad), "{bad:?}");
            let err = check_plain_name(Setting::Topic, bad)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("invalid topic: "), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        let err = check_plain_name(Setting::Topic, "..")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid topic: \"..\" names a directory, not a name of its own"
        );
    }
}
