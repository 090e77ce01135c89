//! `shale acl`: ACL bindings (Kafka's `kafka-acls --add/--list/--remove`).

use clap::{Args, Subcommand};
use shale_client::Client;
use shale_proto::v1::{AclBinding, AclBindingFilter};

use crate::out::{self, OutputFormat};

#[derive(Subcommand)]
pub(crate) enum AclCommand {
    /// Allow (or deny) principals operations on a resource.
    Add {
        #[command(flatten)]
        resource: Resource,
        /// Who: `User:NAME`, or `User:*` for everyone (repeatable).
        #[arg(long = "principal", required = true)]
        principals: Vec<String>,
        /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS,
        /// ALTER_CONFIGS, CLUSTER_ACTION, IDEMPOTENT_WRITE or ALL (repeatable).
        #[arg(long = "operation", required = true)]
        operations: Vec<String>,
        /// From this client address only.
        #[arg(long, default_value = "*")]
        host: String,
        /// Deny instead of allow (a DENY wins over every ALLOW).
        #[arg(long)]
        deny: bool,
    },
    /// List bindings (every one, or those of a resource or principal).
    List {
        #[command(flatten)]
        resource: OptionalResource,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
    },
    /// Remove the bindings that match exactly.
    Remove {
        #[command(flatten)]
        resource: Resource,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// Only this operation's.
        #[arg(long)]
        operation: Option<String>,
    },
}

/// A resource: a topic, a group or the cluster.
#[derive(Args)]
pub(crate) struct Resource {
    /// A topic (with --prefixed: every topic starting with it; `*`: every topic).
    #[arg(long, conflicts_with_all = ["group", "cluster"], required_unless_present_any = ["group", "cluster"])]
    topic: Option<String>,
    /// A consumer group (with --prefixed: every group starting with it).
    #[arg(long, conflicts_with = "cluster")]
    group: Option<String>,
    /// The cluster (creating topics, configs, users and ACLs).
    #[arg(long)]
    cluster: bool,
    /// The name is a prefix.
    #[arg(long)]
    prefixed: bool,
}

#[derive(Args)]
pub(crate) struct OptionalResource {
    /// A topic's bindings, and those that apply to it (wildcard, prefixes).
    #[arg(long, conflicts_with_all = ["group", "cluster"])]
    topic: Option<String>,
    /// A group's bindings, and those that apply to it.
    #[arg(long, conflicts_with = "cluster")]
    group: Option<String>,
    /// The cluster's bindings.
    #[arg(long)]
    cluster: bool,
}

impl Resource {
    fn parts(&self) -> (String, String, String) {
        let (kind, name) = match (&self.topic, &self.group) {
            (Some(t), _) => ("TOPIC", t.clone()),
            (None, Some(g)) => ("GROUP", g.clone()),
            (None, None) => ("CLUSTER", "kafka-cluster".to_string()),
        };
        let pattern = if self.prefixed { "PREFIXED" } else { "LITERAL" };
        (kind.into(), name, pattern.into())
    }
}

pub(crate) async fn run(
    client: Client,
    cmd: AclCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match cmd {
        AclCommand::Add {
            resource,
            principals,
            operations,
            host,
            deny,
        } => {
            let (resource_type, resource_name, pattern_type) = resource.parts();
            let mut acls = Vec::new();
            for principal in &principals {
                for operation in &operations {
                    acls.push(AclBinding {
                        resource_type: resource_type.clone(),
                        resource_name: resource_name.clone(),
                        pattern_type: pattern_type.clone(),
                        principal: principal.clone(),
                        host: host.clone(),
                        operation: operation.to_ascii_uppercase().replace('-', "_"),
                        permission: if deny { "DENY" } else { "ALLOW" }.into(),
                    });
                }
            }
            let n = acls.len();
            client.create_acls(acls).await?;
            out::print(&format!("added {n} ACL binding(s)\n"))?;
        }
        AclCommand::List {
            resource,
            principal,
        } => {
            let (resource_type, resource_name) =
                match (resource.topic, resource.group, resource.cluster) {
                    (Some(t), _, _) => ("TOPIC", t),
                    (None, Some(g), _) => ("GROUP", g),
                    (None, None, true) => ("CLUSTER", "kafka-cluster".into()),
                    (None, None, false) => ("", String::new()),
                };
            let filter = AclBindingFilter {
                resource_type: resource_type.into(),
                pattern_type: if resource_name.is_empty() {
                    "ANY"
                } else {
                    "MATCH"
                }
                .into(),
                resource_name,
                principal: principal.unwrap_or_default(),
                ..Default::default()
            };
            print(&client.describe_acls(filter).await?, output)?;
        }
        AclCommand::Remove {
            resource,
            principal,
            operation,
        } => {
            let (resource_type, resource_name, pattern_type) = resource.parts();
            let filter = AclBindingFilter {
                resource_type,
                resource_name,
                pattern_type,
                principal: principal.unwrap_or_default(),
                operation: operation.unwrap_or_default(),
                ..Default::default()
            };
            let deleted = client.delete_acls(filter).await?;
            out::print(&format!("removed {} ACL binding(s)\n", deleted.len()))?;
        }
    }
    Ok(())
}

fn print(acls: &[AclBinding], output: OutputFormat) -> anyhow::Result<()> {
    match output {
        OutputFormat::Json => {
            let rows: Vec<_> = acls
                .iter()
                .map(|a| {
                    serde_json::json!({
                        "resource_type": a.resource_type, "resource_name": a.resource_name,
                        "pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
                        "operation": a.operation, "permission": a.permission,
                    })
                })
                .collect();
            out::json(&serde_json::json!({ "acls": rows }))
        }
        OutputFormat::Text => {
            let mut text =
                String::from("RESOURCE\tPATTERN\tPRINCIPAL\tHOST\tOPERATION\tPERMISSION\n");
            for a in acls {
                text.push_str(&format!(
                    "{}:{}\t{}\t{}\t{}\t{}\t{}\n",
                    a.resource_type,
                    a.resource_name,
                    a.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission
                ));
            }
            out::print(&text)
        }
    }
}
