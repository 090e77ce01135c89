//! Fresh PostgreSQL databases for tests, through `psql`. The server is the one
//! `SHALE_TEST_POSTGRES_URL` names (default `postgres://postgres@127.0.0.1:5432/postgres`,
//! which `infra/test-services.sh` starts or installs); its user must be able to create
//! databases.

use std::process::Command;

/// The server tests use when `SHALE_TEST_POSTGRES_URL` is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// `SHALE_TEST_POSTGRES_URL`, or [`DEFAULT_URL`]: a database on the test server to
/// connect to as its administrator.
pub fn admin_url() -> String {
    std::env::var("SHALE_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// The server part of a PostgreSQL URL (`postgres://user@host:port`), without the
/// database.
pub fn server_of(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    format!("{scheme}://{authority}")
}

/// The test server's part: `postgres://user@host:port`.
pub fn server() -> String {
    server_of(&admin_url())
}

fn psql(url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args([url, "-Atqc", sql])
        .output()
        .map_err(|e| {
            format!("psql cannot run ({e}): run infra/test-services.sh (it installs PostgreSQL)")
        })?;
    if !out.status.success() {
        return Err(format!(
            "`{sql}` failed at {url}: {} (start PostgreSQL with infra/test-services.sh, or point \
             SHALE_TEST_POSTGRES_URL at a server where this user may create databases)",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A database created for one test (or one run), dropped with this value.
#[derive(Debug)]
pub struct Database {
    /// `postgres://user@host:port`.
    server: String,
    pub name: String,
}

impl Database {
    /// A new database with a unique name starting with `prefix`, on the test server.
    pub fn create(prefix: &str) -> Result<Self, String> {
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        Self::create_named(&server(), &name)
    }

    /// The database `name` on `server` (`postgres://user@host:port`), made afresh: one
    /// left by an earlier run is dropped first.
    pub fn create_named(server: &str, name: &str) -> Result<Self, String> {
        let admin = format!("{server}/postgres");
        psql(
            &admin,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )?;
        psql(&admin, &format!("CREATE DATABASE {name}"))?;
        Ok(Self {
            server: server.to_string(),
            name: name.to_string(),
        })
    }

    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }

    /// Runs SQL in this database; rows as `|`-separated lines.
    pub fn query(&self, sql: &str) -> Result<Vec<String>, String> {
        Ok(psql(&self.url(), sql)?.lines().map(String::from).collect())
    }

    /// Host and port of the server.
    pub fn address(&self) -> Result<std::net::SocketAddr, String> {
        use std::net::ToSocketAddrs;
        let rest = self.server.split("://").nth(1).unwrap_or(&self.server);
        let host = rest.rsplit('@').next().unwrap_or(rest);
        host.to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("cannot resolve {host}"))
    }

    /// This database's URL with the server reached at `host:port` (a proxy), as the
    /// same user.
    pub fn url_via(&self, host: &str, port: u16) -> String {
        let user = self
            .server
            .split("://")
            .nth(1)
            .and_then(|r| r.split_once('@'))
            .map_or("postgres", |(u, _)| u);
        format!("postgres://{user}@{host}:{port}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = psql(
            &format!("{}/postgres", self.server),
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_part_drops_the_database_and_parameters() {
        assert_eq!(
            server_of("postgres://postgres@127.0.0.1:5432/postgres"),
            "postgres://postgres@127.0.0.1:5432"
        );
        assert_eq!(
            server_of("postgres://u:p@db:6543/x?sslmode=disable"),
            "postgres://u:p@db:6543"
        );
        assert_eq!(server_of("postgres://db"), "postgres://db");
    }
}
