//! Credentials out of messages: a URL's `user:password@` part is shown as `***@`.
//!
//! A server's base URL may carry credentials (`http://user:pw@host/v1`, as some proxies want);
//! the URL itself is still used for requests, but every message, log line and error that shows
//! it goes through [`Redacted`]. The API key never enters a message; the HTTP client's own trace
//! output, which dumps request bytes (headers included), is capped by the CLI's log filter.

use std::fmt;

/// Shows a text (a URL, or a message holding URLs) with the user information of every
/// `scheme://user:password@host` replaced by `***`.
#[derive(Debug, Clone, Copy)]
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find("://") {
            let (head, tail) = rest.split_at(at + 3);
            f.write_str(head)?;
            // The authority ends where the path, query or fragment starts, or at text that
            // cannot be in a URL (a message may go on after it).
            let end = tail
                .find(|c: char| {
                    matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>') || c.is_whitespace()
                })
                .unwrap_or(tail.len());
            let authority = &tail[..end];
            match authority.rfind('@') {
                Some(user_end) => {
                    f.write_str("***")?;
                    f.write_str(&authority[user_end..])?;
                }
                None => f.write_str(authority)?,
            }
            rest = &tail[end..];
        }
        f.write_str(rest)
    }
}

/// [`Redacted`] as a `String`.
pub fn redact(text: &str) -> String {
    Redacted(text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_redacted_in_urls_and_messages() {
        assert_eq!(
            redact("http://user:pw@host:8000/v1/chat"),
            "http://***@host:8000/v1/chat"
        );
        assert_eq!(redact("https://tok@h"), "https://***@h");
        assert_eq!(redact("http://h:1/v1?a=b@c"), "http://h:1/v1?a=b@c");
        assert_eq!(
            redact("openai http://a:b@x/v1 and https://c:d@y: refused"),
            "openai http://***@x/v1 and https://***@y: refused"
        );
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(
            redact("bad uri: \"http://u:p@\""),
            "bad uri: \"http://***@\""
        );
    }
}
