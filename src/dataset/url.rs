//! URLs taken from datasets: only web URLs may become links in a page.

/// Whether `url` is an `http://` or `https://` URL (scheme in any case): the only URLs that
/// become links in a page, never `javascript:`, `data:` or a relative path from a dataset.
pub fn is_web_url(url: &str) -> bool {
    let scheme = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    scheme.starts_with("https://") || scheme.starts_with("http://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_urls_only() {
        for good in ["https://stackoverflow.com", "http://x.y/", "HTTPS://X.Y"] {
            assert!(is_web_url(good), "{good}");
        }
        for bad in [
            "javascript:alert(1)",
            " https://x.y",
            "data:,x",
            "//x.y",
            "",
            "http:/x",
        ] {
            assert!(!is_web_url(bad), "{bad}");
        }
    }
}
