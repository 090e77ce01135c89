//! Secrets in the configuration: read from files (so they stay out of `ps` and of
//! the config file), and kept out of logs and error messages.

use std::path::Path;

/// `url` with the password of its `user:password@` part replaced by `***`, for logs
/// and error messages (`postgres://shale:***@db:5432/shale`).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_string(),
    }
}

/// A password or key held in memory: shown as `***` by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// A secret kept in a file: its contents without the final newline.
pub fn read_secret(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_and_nothing_else() {
        for (url, shown) in [
            (
                "postgres://shale:hunter2@db:5432/shale",
                "postgres://shale:***@db:5432/shale",
            ),
            (
                "postgres://shale:p@ss@db/x?sslmode=require",
                "postgres://shale:***@db/x?sslmode=require",
            ),
            (
                "postgres://shale@db:5432/shale",
                "postgres://shale@db:5432/shale",
            ),
            (
                "sqlite:///var/lib/shale/metastore.db",
                "sqlite:///var/lib/shale/metastore.db",
            ),
            ("s3://bucket/prefix", "s3://bucket/prefix"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }
}
