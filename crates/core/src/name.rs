//! Sidecar names: `name:version`, normalised so that `Logger`, ` logger ` and `logger:latest`
//! are the same sidecar wherever a person types them (annotation, config file, CLI).

use std::fmt;

use thiserror::Error;

/// The version a bare `name` stands for. A literal tag, never "the newest".
pub const DEFAULT_VERSION: &str = "latest";

/// The most sidecars one request may name. The API server checks an annotation's size only
/// after mutation, so without a bound a pod creator could make every review parse and look up
/// hundreds of thousands of names.
pub const MAX_REQUESTED: usize = 64;

/// How much of a name an error quotes: a bad name may be as long as the annotation.
const QUOTED: usize = 64;

/// `raw`, cut to [`QUOTED`] characters with `...` when longer: how any text a pod's creator
/// wrote (a requested name, a kind) is quoted in a reply, a warning or a log line.
pub fn quoted(raw: &str) -> String {
    elided(raw, QUOTED)
}

/// `raw`, cut to `limit` characters with `...` when longer.
pub fn elided(raw: &str, limit: usize) -> String {
    match raw.char_indices().nth(limit) {
        Some((end, _)) => format!("{}...", &raw[..end]),
        None => raw.to_owned(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SidecarName {
    name: String,
    version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("sidecar name is empty")]
    Empty,
    #[error("sidecar name {0:?} has more than one ':' (expected name or name:version)")]
    TooManyColons(String),
    #[error("sidecar name {0:?} has an empty name or version around ':'")]
    EmptyPart(String),
    #[error("sidecar name {0:?} contains {1:?}, which cannot appear in a name")]
    ForbiddenCharacter(String, char),
    #[error("the request names {0} sidecars; at most {MAX_REQUESTED} are allowed")]
    TooMany(usize),
}

impl SidecarName {
    /// Parses and normalises one name: trimmed, lowercase, `:latest` when no version is given.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(NameError::Empty);
        }
        // `,` and `=` separate items in the revision annotation; whitespace cannot survive trimming
        // of list items; so none of them may be part of a name.
        if let Some(c) = trimmed
            .chars()
            .find(|c| c.is_whitespace() || matches!(c, ',' | '=' | '"'))
        {
            return Err(NameError::ForbiddenCharacter(quoted(trimmed), c));
        }
        // Most requests are lowercase already: then nothing is copied until the parts are.
        let lower: std::borrow::Cow<'_, str> =
            if trimmed.is_ascii() && !trimmed.bytes().any(|b| b.is_ascii_uppercase()) {
                trimmed.into()
            } else {
                trimmed.to_lowercase().into()
            };
        let mut parts = lower.split(':');
        let name = parts.next().unwrap_or_default();
        let version = parts.next();
        if parts.next().is_some() {
            return Err(NameError::TooManyColons(quoted(trimmed)));
        }
        let version = version.unwrap_or(DEFAULT_VERSION);
        if name.is_empty() || version.is_empty() {
            return Err(NameError::EmptyPart(quoted(trimmed)));
        }
        Ok(Self {
            name: name.to_owned(),
            version: version.to_owned(),
        })
    }

    /// Parses a comma-separated request list, keeping request order and dropping repeats.
    /// Empty items (`a,,b`, a trailing comma) are ignored, as a person would expect.
    /// At most [`MAX_REQUESTED`] items: counted before anything is parsed.
    pub fn parse_list(raw: &str) -> Result<Vec<Self>, NameError> {
        let items = raw.split(',').filter(|item| !item.trim().is_empty());
        let count = items.clone().count();
        if count > MAX_REQUESTED {
            return Err(NameError::TooMany(count));
        }
        let mut names: Vec<Self> = Vec::with_capacity(count);
        for item in items {
            let name = Self::parse(item)?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(names)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for SidecarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.version)
    }
}

impl std::str::FromStr for SidecarName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_names_at_most_64_sidecars_and_errors_quote_a_bounded_name() {
        let many: Vec<String> = (0..100_000).map(|i| format!("s{i}")).collect();
        assert_eq!(
            SidecarName::parse_list(&many.join(",")),
            Err(NameError::TooMany(100_000))
        );
        let most = many[..MAX_REQUESTED].join(",");
        assert_eq!(SidecarName::parse_list(&most).unwrap().len(), MAX_REQUESTED);
        let long = format!("{}:{}:x", "a".repeat(700_000), "b");
        let message = SidecarName::parse(&long).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("aaaa..."), "{message}");
    }

    use super::*;

    #[test]
    fn normalises_case_space_and_default_version() {
        assert_eq!(
            SidecarName::parse(" Logger:V1 ").unwrap().to_string(),
            "logger:v1"
        );
        assert_eq!(
            SidecarName::parse("logger").unwrap().to_string(),
            "logger:latest"
        );
        assert_eq!(
            SidecarName::parse("logger").unwrap(),
            SidecarName::parse("LOGGER:latest").unwrap()
        );
    }

    #[test]
    fn rejects_malformed_names() {
        assert_eq!(SidecarName::parse("  "), Err(NameError::Empty));
        assert_eq!(
            SidecarName::parse("a:b:c"),
            Err(NameError::TooManyColons("a:b:c".into()))
        );
        assert_eq!(
            SidecarName::parse(":v1"),
            Err(NameError::EmptyPart(":v1".into()))
        );
        assert_eq!(
            SidecarName::parse("logger:"),
            Err(NameError::EmptyPart("logger:".into()))
        );
        assert_eq!(
            SidecarName::parse("log ger"),
            Err(NameError::ForbiddenCharacter("log ger".into(), ' '))
        );
        assert!(matches!(
            SidecarName::parse("a=b"),
            Err(NameError::ForbiddenCharacter(_, '='))
        ));
    }

    #[test]
    fn list_keeps_request_order_trims_and_drops_repeats() {
        let names = SidecarName::parse_list(" metrics:v2 , logger:v1,, LOGGER:v1 ,").unwrap();
        let shown: Vec<String> = names.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["metrics:v2", "logger:v1"]);
        assert!(SidecarName::parse_list("").unwrap().is_empty());
        assert!(SidecarName::parse_list("ok, a:b:c").is_err());
    }
}
