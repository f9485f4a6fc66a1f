//! How programs find the vendor's functions, and the other preload libraries they already
//! run, with npud's interposer loaded beside them. The interposer exports `dlsym`, so every
//! lookup in the process passes through it: what a lookup answers must not change because
//! npud is there, except that npud's hooks stand in for the vendor functions they wrap.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{self, App, Shared, acl_command, preload_library};
use npud_tests::{Daemon, bin};
use std::ffi::OsString;
use std::path::Path;

/// Streams each program creates; with its default stream the device holds one more.
const STREAMS: u32 = 3;

/// A program that links no vendor library and probes with `dlsym(RTLD_DEFAULT)` (torch_npu
/// does so first when `LD_PRELOAD` is set) finds no AscendCL or CUDA name before it loads
/// one, natively and under npud; once AscendCL is loaded it finds npud's hooks, so the
/// streams it creates through them are admitted: npud counts what the driver holds.
#[test]
fn a_program_that_probes_for_vendor_functions_finds_only_those_that_exist() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        native::dlsym_probe_app(),
        &STREAMS.to_string(),
        &format!("ok {STREAMS}"),
        STREAMS + 1,
    );
}

/// The program with `preloads` as its `LD_PRELOAD`, started directly (`npud`: None) or
/// through `npuctl run` (which puts npud's library before the user's).
fn wrapped(shared: &Shared, preloads: OsString, npud: Option<&Daemon>, direct: bool) -> App {
    let program = native::acl_wrapped_app();
    let mut cmd = match npud {
        Some(d) if !direct => {
            let mut c = acl_command(&bin("npuctl"), &shared.path, None);
            c.arg("--socket").arg(&d.socket).arg("run").arg("--").arg(program);
            c
        }
        Some(d) => acl_command(program, &shared.path, Some((d, STREAMS + 1))),
        None => acl_command(program, &shared.path, None),
    };
    cmd.arg(STREAMS.to_string()).env("LD_PRELOAD", preloads);
    App::spawn(cmd)
}

fn joined(first: &Path, second: &Path) -> OsString {
    let mut both = first.as_os_str().to_owned();
    both.push(" ");
    both.push(second);
    both
}

/// A preload library that wraps functions and calls the next definition with
/// `dlsym(RTLD_NEXT)` (tracers, profilers, shims) keeps working beside npud's, in either
/// order, and the streams are admitted either way.
///
/// - `npuctl run` puts npud's library first and the user's `LD_PRELOAD` after it. The
///   wrapper's `RTLD_NEXT` lookups must still mean "after the wrapper": answered as if
///   made from npud's library, the wrapper found itself and recursed until it crashed.
///   npud's hook of `aclrtCreateStream` calls the vendor's own function, so a wrapper
///   after npud does not see creations; it sees every other call.
/// - With the wrapper first, its `RTLD_NEXT` finds npud's hook. Answered as if made from
///   npud's library, it found the vendor's function instead and the streams it created
///   were never admitted (npud then saw them only as untracked).
#[test]
fn a_preloaded_wrapper_that_calls_the_next_definition_works_beside_npud() {
    let wrapper = native::next_wrapper_library();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let ok = |wrapped_creates: u32| format!("ok {STREAMS} wrapped {wrapped_creates} {STREAMS}");

    let mut alone = wrapped(&shared, wrapper.as_os_str().to_owned(), None, false);
    assert_eq!(alone.line(), ok(STREAMS), "natively the wrapper sees every call");
    alone.release();

    let mut after = wrapped(&shared, wrapper.as_os_str().to_owned(), Some(&d), false);
    assert_eq!(after.line(), ok(0), "the wrapper after npud's library");
    native::created_as_the_driver_holds(&d, &shared, STREAMS + 1);
    native::released_to_nothing(&d, &shared, after);

    let mut before = wrapped(&shared, joined(wrapper, &preload_library()), Some(&d), true);
    assert_eq!(before.line(), ok(STREAMS), "the wrapper before npud's library");
    native::created_as_the_driver_holds(&d, &shared, STREAMS + 1);
    native::released_to_nothing(&d, &shared, before);
}
