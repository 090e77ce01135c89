//! Hosts of their own for brokers: one network namespace per broker, joined to the
//! machine by a veth pair, so traffic between brokers, to the metastore and to clients
//! can be cut one way at a time.
//!
//! Broker `i` lives at `10.{net}.{i}.2`. On the machine's side of its veth, three
//! addresses reach the machine: `.1` is where clients (this process) come from, `.3`
//! where it reaches PostgreSQL and `.4` the object store (both through proxies that
//! listen on every address). A cut is a blackhole route inside the broker's namespace:
//! to another broker's address (brokers), to `.3` (PostgreSQL), to `.1` (clients). The
//! machine forwards between the veths (`net.ipv4.ip_forward`, restored at the end).
//! Everything is removed on drop.

use std::process::Command;

use anyhow::{Context, bail};

/// What a broker can be cut off from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Every other broker (replication, both ways).
    Brokers,
    /// The metastore.
    Postgres,
    /// The object store.
    ObjectStore,
    /// Clients (this process), but neither brokers nor the metastore.
    Clients,
}

/// The namespaces of a run.
pub struct Net {
    tag: String,
    net: u8,
    brokers: usize,
    forward_was: String,
}

fn run(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("cannot run {}", args[0]))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Net {
    /// Creates `brokers` namespaces named `{tag}b{i}` on `10.{net}.{i}.0/24`. Needs
    /// root and `ip` (iproute2).
    pub fn create(tag: &str, net: u8, brokers: usize) -> anyhow::Result<Self> {
        if !rustix::process::geteuid().is_root() {
            bail!(
                "network namespaces need root: run the fault tests as root (CI does), \
                 or skip the partition faults"
            );
        }
        let forward_was = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
            .context("cannot read net.ipv4.ip_forward")?
            .trim()
            .to_string();
        let net = Self {
            tag: tag.to_string(),
            net,
            brokers,
            forward_was,
        };
        // Leftovers of earlier runs (a killed run removes nothing) go first: their
        // addresses would clash.
        net.remove();
        remove_leftovers();
        note_owner(tag);
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
            .context("cannot enable net.ipv4.ip_forward")?;
        for i in 0..brokers {
            net.create_one(i)?;
        }
        Ok(net)
    }

    fn ns(&self, i: usize) -> String {
        format!("{}b{i}", self.tag)
    }

    fn veth(&self, i: usize) -> (String, String) {
        (format!("{}h{i}", self.tag), format!("{}n{i}", self.tag))
    }

    /// Broker `i`'s own address.
    pub fn broker_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.2", self.net)
    }

    /// Where broker `i` reaches PostgreSQL's proxy.
    pub fn postgres_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.3", self.net)
    }

    /// Where broker `i` reaches the object store's proxy.
    pub fn object_store_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.4", self.net)
    }

    fn client_ip(&self, i: usize) -> String {
        format!("10.{}.{i}.1", self.net)
    }

    fn create_one(&self, i: usize) -> anyhow::Result<()> {
        let ns = self.ns(i);
        let (host, inner) = self.veth(i);
        run(&["ip", "netns", "add", &ns])?;
        run(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &inner,
        ])?;
        run(&["ip", "link", "set", &inner, "netns", &ns])?;
        for (ip, len) in [
            (self.client_ip(i), "/24"),
            (self.postgres_ip(i), "/32"),
            (self.object_store_ip(i), "/32"),
        ] {
            run(&["ip", "addr", "add", &format!("{ip}{len}"), "dev", &host])?;
        }
        run(&["ip", "link", "set", &host, "up"])?;
        let exec = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &ns];
            all.extend_from_slice(args);
            run(&all)
        };
        exec(&["ip", "link", "set", "lo", "up"])?;
        exec(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", self.broker_ip(i)),
            "dev",
            &inner,
        ])?;
        exec(&["ip", "link", "set", &inner, "up"])?;
        exec(&["ip", "route", "add", "default", "via", &self.client_ip(i)])?;
        Ok(())
    }

    /// The command prefix that runs a program in broker `i`'s namespace.
    pub fn exec_prefix(&self, i: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.ns(i)]
    }

    fn blackholes(&self, i: usize, cut: Cut) -> Vec<String> {
        match cut {
            Cut::Brokers => (0..self.brokers)
                .filter(|&j| j != i)
                .map(|j| self.broker_ip(j))
                .collect(),
            Cut::Postgres => vec![self.postgres_ip(i)],
            Cut::ObjectStore => vec![self.object_store_ip(i)],
            Cut::Clients => vec![self.client_ip(i)],
        }
    }

    /// Cuts broker `i` off from `cut` (both directions: its answers go nowhere).
    pub fn cut(&self, i: usize, cut: Cut) -> anyhow::Result<()> {
        let ns = self.ns(i);
        for ip in self.blackholes(i, cut) {
            run(&[
                "ip",
                "netns",
                "exec",
                &ns,
                "ip",
                "route",
                "replace",
                "blackhole",
                &format!("{ip}/32"),
            ])?;
        }
        Ok(())
    }

    /// Undoes [`Net::cut`].
    pub fn heal(&self, i: usize, cut: Cut) -> anyhow::Result<()> {
        let ns = self.ns(i);
        for ip in self.blackholes(i, cut) {
            // Already healed is fine.
            let _ = run(&[
                "ip",
                "netns",
                "exec",
                &ns,
                "ip",
                "route",
                "del",
                "blackhole",
                &format!("{ip}/32"),
            ]);
        }
        Ok(())
    }

    fn remove(&self) {
        for i in 0..self.brokers {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(i)])
                .output();
            let _ = Command::new("ip")
                .args(["link", "del", &self.veth(i).0])
                .output();
        }
    }
}

/// Where each run notes its process id under its tag, so a later run can tell the
/// namespaces of a killed run (its process is gone) from those of a running one.
const OWNERS: &str = "/tmp/shale-chaos-netns";

fn note_owner(tag: &str) {
    let _ = std::fs::create_dir_all(OWNERS);
    let _ = std::fs::write(format!("{OWNERS}/{tag}"), std::process::id().to_string());
}

/// Namespaces and veths of runs that were killed (a killed run removes nothing, and
/// its addresses would clash): those whose noted owner process is gone.
fn remove_leftovers() {
    let Ok(owners) = std::fs::read_dir(OWNERS) else {
        return;
    };
    let dead: Vec<String> = owners
        .flatten()
        .filter_map(|e| {
            let tag = e.file_name().into_string().ok()?;
            let pid: i32 = std::fs::read_to_string(e.path())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            (!alive).then_some(tag)
        })
        .collect();
    if dead.is_empty() {
        return;
    }
    let list = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let owned_by_dead = |name: &str| dead.iter().any(|t| name.starts_with(t.as_str()));
    for line in list(&["netns", "list"]).lines() {
        if let Some(name) = line.split_whitespace().next().filter(|n| owned_by_dead(n)) {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
    for line in list(&["-o", "link"]).lines() {
        let name = line.split(": ").nth(1).unwrap_or("");
        let name = name.split('@').next().unwrap_or("");
        if owned_by_dead(name) {
            let _ = Command::new("ip").args(["link", "del", name]).output();
        }
    }
    for t in &dead {
        let _ = std::fs::remove_file(format!("{OWNERS}/{t}"));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
        let _ = std::fs::remove_file(format!("{OWNERS}/{}", self.tag));
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", &self.forward_was);
    }
}
