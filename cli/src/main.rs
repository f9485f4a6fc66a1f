//! `npuctl`: the command-line client of npud.

mod args;
mod commands;
mod output;

use args::{Cli, Command};
use clap::Parser;
use commands::Ctx;
use npud_client::Target;
use std::process::ExitCode;

async fn run(cli: Cli) -> anyhow::Result<()> {
    let target = match (&cli.socket, &cli.endpoint) {
        (Some(p), _) => Target::Socket(p.clone()),
        (None, Some(e)) if e.starts_with("https://") => Target::Tls {
            url: e.clone(),
            tls: npud_client::TlsOptions::from_files(
                cli.tls_ca.as_deref(),
                cli.tls_cert.as_deref(),
                cli.tls_key.as_deref(),
            )?,
        },
        (None, Some(e)) => Target::Endpoint(e.clone()),
        (None, None) => Target::default_socket(),
    };
    let ctx = Ctx { target, output: cli.output, token: cli.token.clone() };
    match cli.command {
        Command::Device(cmd) => cmd.run(&ctx).await?,
        Command::Stream(cmd) => cmd.run(&ctx).await?,
        Command::Event(cmd) => cmd.run(&ctx).await?,
        Command::Status => commands::status::show(&ctx).await?,
        Command::Top { interval, iterations } => commands::status::top(&ctx, interval, iterations).await?,
        Command::Health { service } => commands::status::health(&ctx, service).await?,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "npuctl", &mut script);
            output::write_bytes(&script);
        }
        Command::Run(_) => unreachable_run()?,
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut page)?;
            output::write_bytes(&page);
        }
        Command::Session(cmd) => cmd.run(&ctx).await?,
        Command::Tenant(cmd) => cmd.run(&ctx).await?,
        Command::Quota(cmd) => cmd.run(&ctx).await?,
    }
    Ok(())
}

/// `run` is handled before the runtime starts; reaching it here is a usage error.
fn unreachable_run() -> anyhow::Result<()> {
    Err(anyhow::anyhow!("run is handled before the runtime starts"))
}

/// Distinct exit codes so scripts can tell a full device from a typo.
fn exit_code(e: &anyhow::Error) -> u8 {
    use tonic::Code;
    match e.downcast_ref::<npud_client::Error>() {
        Some(npud_client::Error::Connect { .. }) => 8,
        Some(err) => match err.code() {
            Some(Code::InvalidArgument) => 2,
            Some(Code::NotFound) => 3,
            Some(Code::ResourceExhausted) => 4,
            Some(Code::DeadlineExceeded) => 5,
            Some(Code::FailedPrecondition) => 6,
            Some(Code::PermissionDenied | Code::Unauthenticated) => 7,
            Some(Code::Unavailable) => 8,
            _ => 1,
        },
        None => 2,
    }
}

/// Help and version go to stdout as clap writes them; a usage error is one line on stderr
/// (the contract: a failure is one line), exit 2 as clap's.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand { 2 } else { 0 });
    }
    eprintln!("npuctl: {} (see npuctl --help)", usage_line(&e.render().to_string()));
    ExitCode::from(2)
}

/// clap's message folded into one line: its first paragraph, which for missing arguments
/// lists them on lines of their own (`... not provided:` then `  <CMD>...`).
fn usage_line(text: &str) -> String {
    let paragraph = text.trim_start().split("\n\n").next().unwrap_or_default();
    let line = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    match line.is_empty() {
        true => "invalid arguments".to_string(),
        false => line.to_string(),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if let Command::Run(args) = &cli.command {
        if cli.endpoint.is_some() {
            // The interposer knows a process by its credentials on the Unix socket.
            eprintln!(
                "npuctl: run admits a program through npud's Unix socket; --endpoint cannot be used with it (see npuctl --help)"
            );
            return ExitCode::from(2);
        }
        // exec needs no runtime; it returns only when the program could not be started.
        let (e, code) = commands::run::exec(args, cli.socket.as_deref());
        eprintln!("npuctl: {}", format!("{e:#}").replace('\n', " "));
        return ExitCode::from(code);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("npuctl: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("npuctl: {line}");
            ExitCode::from(exit_code(&e))
        }
    }
}
