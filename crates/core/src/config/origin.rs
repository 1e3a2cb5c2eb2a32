//! Where a config came from: a file of the config directory, or one item of a ConfigMap. It
//! names the config in every message and keys its last good version.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// A file, as `directory/file` (or the path given to `validate`).
    File(String),
    /// One data item of a ConfigMap (boxed: errors carry an origin and stay small).
    ConfigMapItem(Box<ConfigMapItem>),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigMapItem {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl Origin {
    pub fn configmap_item(namespace: &str, name: &str, key: &str) -> Self {
        Origin::ConfigMapItem(Box::new(ConfigMapItem {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        }))
    }

    /// The ConfigMap holding the config, for a ConfigMap item.
    pub fn configmap(&self) -> Option<&str> {
        match self {
            Origin::ConfigMapItem(item) => Some(&item.name),
            Origin::File(_) => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => f.write_str(path),
            // A manifest may leave the namespace to `kubectl apply -n`: no "/NAME" then.
            Origin::ConfigMapItem(item) if item.namespace.is_empty() => {
                write!(f, "ConfigMap {} item {}", item.name, item.key)
            }
            Origin::ConfigMapItem(item) => write!(
                f,
                "ConfigMap {}/{} item {}",
                item.namespace, item.name, item.key
            ),
        }
    }
}

impl From<&str> for Origin {
    fn from(path: &str) -> Self {
        Origin::File(path.to_owned())
    }
}

impl From<String> for Origin {
    fn from(path: String) -> Self {
        Origin::File(path)
    }
}

impl PartialEq<&str> for Origin {
    fn eq(&self, other: &&str) -> bool {
        match self {
            Origin::File(path) => path == other,
            Origin::ConfigMapItem(item) => (|| {
                let mut rest = other.strip_prefix("ConfigMap ")?;
                if !item.namespace.is_empty() {
                    rest = rest
                        .strip_prefix(item.namespace.as_str())?
                        .strip_prefix('/')?;
                }
                let rest = rest
                    .strip_prefix(item.name.as_str())?
                    .strip_prefix(" item ")?;
                Some(rest == item.key)
            })()
            .unwrap_or(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_prints_as_a_person_finds_it() {
        assert_eq!(
            Origin::from("config/logger.yaml").to_string(),
            "config/logger.yaml"
        );
        let item = Origin::configmap_item("injector-system", "sidecars", "logger.yaml");
        assert_eq!(
            item.to_string(),
            "ConfigMap injector-system/sidecars item logger.yaml"
        );
        assert_eq!(item.configmap(), Some("sidecars"));
        assert_eq!(Origin::from("a.yaml").configmap(), None);
        assert!(item == "ConfigMap injector-system/sidecars item logger.yaml");
        assert!(item != "ConfigMap injector-system/sidecars item other.yaml");
        assert!(item != "config/logger.yaml");
    }
}
