//! The bench's watches end with their server: an [`Observer`] whose emulator has gone lets its
//! runtime shut down (it once spun at 100 % of a core forever, retrying a refused connection
//! without a pause, so dropping the runtime never returned).

use std::sync::mpsc;
use std::time::Duration;

use scale_bench::observe::Observer;
use scale_bench::procs::{TempDir, start_emulator};

/// Starts the emulator and the bench's watches, stops the emulator under them, keeps the
/// watches running `orphaned`, then drops the observer and the runtime.
fn run(orphaned: Duration) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = TempDir::new().unwrap();
        let (emu, _, client) = start_emulator(&crate::binaries(), &dir.path).await.unwrap();
        let obs = Observer::start(&client, Duration::from_secs(60))
            .await
            .unwrap();
        emu.stop().await;
        tokio::time::sleep(orphaned).await;
        drop(obs);
    });
    drop(rt);
}

#[test]
fn the_observer_of_a_stopped_emulator_lets_the_runtime_end() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        run(Duration::from_secs(2));
        let _ = tx.send(());
    });
    // Wide: the whole run takes about a second; a spinning watch never ends.
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the runtime of a stopped emulator's observer never shut down");
}
