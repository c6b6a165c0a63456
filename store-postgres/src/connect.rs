//! From `rag.store.postgres` to a connection configuration: the URL, the password (from the
//! environment variable `password_env` names, else from the URL), the session settings every
//! connection starts with, and errors that name the setting to fix — never the password.

use std::time::Duration;

use orkeon_knowledge::settings::PostgresSettings;
use orkeon_knowledge::store::StoreError;
use tokio_postgres::Config;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed connection configuration and what errors may mention about it.
#[derive(Clone)]
pub(crate) struct Target {
    pub config: Config,
    /// `user@host:port/database`, for messages.
    pub describe: String,
    /// Where the password came from (`the environment variable X`, `the URL`), for messages.
    password_source: Option<String>,
    /// The password, only to scrub it from error messages.
    secret: Option<String>,
}

impl Target {
    /// Parses `settings.url` and applies `settings.password_env`.
    pub(crate) fn from_settings(settings: &PostgresSettings) -> Result<Self, StoreError> {
        let url = settings
            .url
            .as_deref()
            .filter(|url| !url.trim().is_empty())
            .ok_or_else(|| StoreError::InvalidSetting {
                key: "postgres.url",
                reason: "is required with `rag.store.provider: postgres` (postgres://user@host:port/database)".into(),
            })?;
        let url_secret = url_password(url);
        let mut config: Config =
            url.parse()
                .map_err(|error: tokio_postgres::Error| StoreError::InvalidSetting {
                    key: "postgres.url",
                    reason: format!(
                        "is not a valid PostgreSQL URL ({}): {}",
                        redact_url(url),
                        scrub(&error.to_string(), url_secret.as_deref())
                    ),
                })?;
        let mut password_source = config.get_password().map(|_| "the URL".to_string());
        let mut secret = url_secret;
        if let Some(var) = settings
            .password_env
            .as_deref()
            .filter(|v| !v.trim().is_empty())
        {
            let password = std::env::var(var).map_err(|_| StoreError::InvalidSetting {
                key: "postgres.password_env",
                reason: format!(
                    "names the environment variable {var}, which is not set (or not valid UTF-8); set it to the database password"
                ),
            })?;
            config.password(password.as_bytes());
            password_source = Some(format!("the environment variable {var}"));
            secret = Some(password);
        }
        if config.get_application_name().is_none() {
            config.application_name("orkeon");
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        let host = config
            .get_hosts()
            .first()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let describe = format!(
            "{}@{host}:{port}/{}",
            config.get_user().unwrap_or("(no user)"),
            config.get_dbname().unwrap_or("(default database)")
        );
        Ok(Self {
            config,
            describe,
            password_source,
            secret,
        })
    }

    /// The configuration with session settings every connection starts with.
    pub(crate) fn with_session(&self, search_path: &str, statement_timeout_ms: u64) -> Config {
        let mut config = self.config.clone();
        config.options(format!(
            "-c search_path={search_path} -c statement_timeout={statement_timeout_ms} -c client_min_messages=warning"
        ));
        config
    }

    /// `message` without the password.
    pub(crate) fn scrub(&self, message: &str) -> String {
        scrub(message, self.secret.as_deref())
    }

    /// A failure to connect, naming the setting to fix.
    pub(crate) fn connect_error(&self, error: &tokio_postgres::Error) -> StoreError {
        let detail = self.scrub(&error.to_string());
        let auth = matches!(
            error.code(),
            Some(code) if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        ) || detail.contains("password missing");
        if auth {
            let key = if self
                .password_source
                .as_deref()
                .is_some_and(|s| s != "the URL")
            {
                "postgres.password_env"
            } else {
                "postgres.url"
            };
            let source = self
                .password_source
                .as_deref()
                .unwrap_or("nowhere: set rag.store.postgres.password_env or put it in the URL");
            return StoreError::InvalidSetting {
                key,
                reason: format!(
                    "PostgreSQL at {} refused the login (password from {source}): {detail}",
                    self.describe
                ),
            };
        }
        StoreError::InvalidSetting {
            key: "postgres.url",
            reason: format!(
                "cannot connect to PostgreSQL at {}: {detail}; check the URL and that the server is running",
                self.describe
            ),
        }
    }
}

/// `message` with every occurrence of `secret` replaced by `***`.
fn scrub(message: &str, secret: Option<&str>) -> String {
    match secret.filter(|s| !s.is_empty()) {
        Some(secret) => message.replace(secret, "***"),
        None => message.to_string(),
    }
}

/// The password written in a URL (`scheme://user:password@host…`) or in a `key=value` string
/// (`password=…`), if any.
fn url_password(url: &str) -> Option<String> {
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let userinfo = authority.rsplit_once('@')?.0;
        return userinfo.split_once(':').map(|(_, p)| p.to_string());
    }
    url.split_whitespace()
        .find_map(|pair| pair.strip_prefix("password="))
        .map(|p| p.trim_matches('\'').to_string())
}

/// `url` with its password replaced by `***` (what `orkeon config` and errors show).
pub fn redact_url(url: &str) -> String {
    match url_password(url) {
        Some(password) if !password.is_empty() => {
            if url.contains("://") {
                url.replacen(&format!(":{password}@"), ":***@", 1)
            } else {
                url.split_whitespace()
                    .map(|pair| {
                        if pair.starts_with("password=") {
                            "password=***"
                        } else {
                            pair
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password_only() {
        assert_eq!(
            redact_url("postgres://orkeon:s3cr%40t@db.local:5432/orkeon?sslmode=disable"),
            "postgres://orkeon:***@db.local:5432/orkeon?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://orkeon@127.0.0.1:54329/orkeon"),
            "postgres://orkeon@127.0.0.1:54329/orkeon"
        );
        assert_eq!(
            redact_url("host=db user=orkeon password=hunter2 dbname=orkeon"),
            "host=db user=orkeon password=*** dbname=orkeon"
        );
    }

    #[test]
    fn a_missing_password_variable_names_the_setting_and_the_variable() {
        let settings = PostgresSettings {
            url: Some("postgres://orkeon@127.0.0.1:1/orkeon".into()),
            password_env: Some("ORKEON_TEST_NO_SUCH_PASSWORD_VAR".into()),
            ..PostgresSettings::default()
        };
        let error = Target::from_settings(&settings).err().expect("an error");
        let message = error.to_string();
        assert!(
            message.starts_with("rag.store.postgres.password_env:"),
            "{message}"
        );
        assert!(
            message.contains("ORKEON_TEST_NO_SUCH_PASSWORD_VAR"),
            "{message}"
        );
    }

    #[test]
    fn a_malformed_url_names_the_setting_without_the_password() {
        let settings = PostgresSettings {
            url: Some("postgres://orkeon:topsecret@127.0.0.1:notaport/orkeon".into()),
            ..PostgresSettings::default()
        };
        let message = Target::from_settings(&settings)
            .err()
            .expect("an error")
            .to_string();
        assert!(message.starts_with("rag.store.postgres.url:"), "{message}");
        assert!(!message.contains("topsecret"), "{message}");
    }
}
