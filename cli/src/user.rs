//! `shale user`: users and their SCRAM credentials (Kafka's
//! `kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=…]'`).

use std::io::Read;

use clap::Subcommand;
use shale_client::{Client, SCRAM_MECHANISMS};

use crate::out::{self, OutputFormat};

#[derive(Subcommand)]
pub(crate) enum UserCommand {
    /// Create a user, or set a user's password (for Kafka's SASL/SCRAM and PLAIN).
    Create {
        /// The user's name.
        name: String,
        /// The password. It shows in `ps`: prefer --password-file or
        /// SHALE_USER_PASSWORD.
        #[arg(long, env = "SHALE_USER_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// A file holding the password (`-`: stdin); a final newline is dropped.
        #[arg(long, conflicts_with = "password")]
        password_file: Option<String>,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: both).
        #[arg(long = "mechanism")]
        mechanisms: Vec<String>,
        /// PBKDF2 iterations, 4096 to 16384.
        #[arg(long, default_value_t = 8192)]
        iterations: i32,
    },
    /// List users and their credentials.
    List {
        /// Only these users.
        names: Vec<String>,
    },
    /// Delete a user's credentials.
    Delete {
        /// The user's name.
        name: String,
        /// Only this mechanism's credential (repeatable; default: all of them).
        #[arg(long = "mechanism")]
        mechanisms: Vec<String>,
    },
}

pub(crate) async fn run(
    client: Client,
    cmd: UserCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match cmd {
        UserCommand::Create {
            name,
            password,
            password_file,
            mechanisms,
            iterations,
        } => {
            let password = match (password, password_file) {
                (Some(p), _) => p,
                (None, Some(file)) => read_password(&file)?,
                (None, None) => anyhow::bail!(
                    "give the password with --password-file, SHALE_USER_PASSWORD or --password"
                ),
            };
            if password.is_empty() {
                anyhow::bail!("the password is empty");
            }
            let mechanisms = chosen(&mechanisms);
            client
                .set_user_password(&name, &password, &mechanisms, iterations)
                .await?;
            out::print(&format!("user {name}: {} set\n", mechanisms.join(", ")))?;
        }
        UserCommand::List { names } => {
            let users = client.describe_users(names).await?;
            match output {
                OutputFormat::Json => {
                    let users: Vec<_> = users
                        .iter()
                        .map(|u| {
                            serde_json::json!({
                                "user": u.user,
                                "error": (u.error_code != 0).then_some(&u.error_message),
                                "credentials": u.credentials.iter().map(|c| serde_json::json!({
                                    "mechanism": c.mechanism,
                                    "iterations": c.iterations,
                                })).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    out::json(&serde_json::json!({ "users": users }))?;
                }
                OutputFormat::Text => {
                    let mut text = String::from("USER\tMECHANISM\tITERATIONS\n");
                    for u in &users {
                        if u.error_code != 0 {
                            text.push_str(&format!("{}\t-\t{}\n", u.user, u.error_message));
                        }
                        for c in &u.credentials {
                            text.push_str(&format!(
                                "{}\t{}\t{}\n",
                                u.user, c.mechanism, c.iterations
                            ));
                        }
                    }
                    out::print(&text)?;
                }
            }
        }
        UserCommand::Delete { name, mechanisms } => {
            let mechanisms: Vec<String> = if mechanisms.is_empty() {
                let users = client.describe_users(vec![name.clone()]).await?;
                let user = users.into_iter().next();
                if let Some(u) = user.as_ref().filter(|u| u.error_code != 0) {
                    anyhow::bail!("{}", u.error_message);
                }
                user.map(|u| u.credentials.into_iter().map(|c| c.mechanism).collect())
                    .unwrap_or_default()
            } else {
                mechanisms
            };
            let names: Vec<&str> = mechanisms.iter().map(String::as_str).collect();
            client.delete_user(&name, &names).await?;
            out::print(&format!("user {name}: {} deleted\n", names.join(", ")))?;
        }
    }
    Ok(())
}

fn chosen(mechanisms: &[String]) -> Vec<&str> {
    if mechanisms.is_empty() {
        SCRAM_MECHANISMS.to_vec()
    } else {
        mechanisms.iter().map(String::as_str).collect()
    }
}

fn read_password(file: &str) -> anyhow::Result<String> {
    let mut text = String::new();
    if file == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("cannot read the password file {file}: {e}"))?;
    }
    let trimmed = text.strip_suffix('\n').unwrap_or(&text);
    Ok(trimmed.strip_suffix('\r').unwrap_or(trimmed).to_string())
}
