//! `kiln-ballista`: starts a Ballista scheduler or executor that runs kiln.
//!
//! ```text
//! kiln-ballista scheduler [--bind ADDR] [--rows-per-query N]
//!                                                     (default 0.0.0.0:50050; N: every executor
//!                                                     runs one kiln query per N rows, else its
//!                                                     device's default)
//! kiln-ballista executor --scheduler HOST:PORT [--bind ADDR] [--external-host HOST] [--vcores N]
//!                                                     (default bind 0.0.0.0:50051, gRPC on the next port)
//! ```
//!
//! kiln runs on the best device present, or the one `KILN_BACKEND` names. Errors are one line
//! on stderr and exit status 1.

use ballista_executor::executor_process::start_executor_process;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::scheduler_process::start_server;
use std::error::Error;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: kiln-ballista scheduler [--bind ADDR] [--rows-per-query N] | \
                     kiln-ballista executor --scheduler HOST:PORT [--bind ADDR] \
                     [--external-host HOST] [--vcores N]";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln-ballista: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &[String]) -> Result<(), Box<dyn Error>> {
    let (role, flags) = args.split_first().ok_or(USAGE)?;
    let flags = Flags::parse(flags)?;
    match role.as_str() {
        "scheduler" => {
            flags.only(&["--bind", "--rows-per-query"])?;
            let bind: SocketAddr =
                parsed("--bind", flags.get("--bind").unwrap_or("0.0.0.0:50050"))?;
            let kiln = kiln::Context::new()?;
            let mut rule = kiln_datafusion::KilnRule::new(kiln.clone());
            if let Some(rows) = flags.get("--rows-per-query") {
                rule = rule.rows_per_query(parsed("--rows-per-query", rows)?);
            }
            let config = kiln_ballista::scheduler_config_with(rule, kiln.clone(), bind);
            let cluster = BallistaCluster::new_from_config(&config).await?;
            println!(
                "kiln-ballista scheduler on {bind}, kiln on {}",
                kiln.device().name
            );
            start_server(cluster, bind, Arc::new(config)).await?;
        }
        "executor" => {
            flags.only(&["--bind", "--scheduler", "--external-host", "--vcores"])?;
            let bind: SocketAddr =
                parsed("--bind", flags.get("--bind").unwrap_or("0.0.0.0:50051"))?;
            let scheduler = flags.get("--scheduler").ok_or(USAGE)?;
            let (host, port) = scheduler
                .rsplit_once(':')
                .ok_or("--scheduler takes HOST:PORT")?;
            let port = parsed("--scheduler's port", port)?;
            let kiln = kiln::Context::new()?;
            let mut config = kiln_ballista::executor_config(kiln.clone(), bind, host, port);
            config.external_host = flags.get("--external-host").map(str::to_string);
            if let Some(v) = flags.get("--vcores") {
                config.vcores = parsed("--vcores", v)?;
            }
            println!(
                "kiln-ballista executor on {bind}, scheduler {scheduler}, kiln on {}",
                kiln.device().name
            );
            start_executor_process(Arc::new(config)).await?;
        }
        _ => return Err(USAGE.into()),
    }
    Ok(())
}

/// `value`, the value of `flag`, parsed, or an error naming both.
fn parsed<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|e| format!("{flag} {value}: {e}"))
}

/// `--name value` pairs.
struct Flags(Vec<(String, String)>);

impl Flags {
    fn parse(args: &[String]) -> Result<Flags, String> {
        let pairs = args.chunks(2).map(|pair| match pair {
            [name, value] if name.starts_with("--") => Ok((name.clone(), value.clone())),
            _ => Err(format!("expected `--flag value`, got {pair:?}; {USAGE}")),
        });
        pairs.collect::<Result<_, _>>().map(Flags)
    }

    /// Fails on a flag not in `known`.
    fn only(&self, known: &[&str]) -> Result<(), String> {
        match self.0.iter().find(|(n, _)| !known.contains(&n.as_str())) {
            Some((n, _)) => Err(format!("unknown flag {n}; {USAGE}")),
            None => Ok(()),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}
