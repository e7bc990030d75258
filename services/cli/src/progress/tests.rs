//! The progress bar's text: proportional, bounded, and sane at the edges.

use snug_restore::Progress;

use super::render;

#[test]
fn the_bar_is_proportional_and_bounded() {
    let mib = 1024 * 1024;
    assert_eq!(
        render(Progress {
            received: 0,
            total: 4 * mib
        }),
        "[..............................]   0.0%  0.0/4.0 MiB"
    );
    assert_eq!(
        render(Progress {
            received: mib,
            total: 4 * mib
        }),
        "[#######.......................]  25.0%  1.0/4.0 MiB"
    );
    assert_eq!(
        render(Progress {
            received: 4 * mib,
            total: 4 * mib
        }),
        "[##############################] 100.0%  4.0/4.0 MiB"
    );
    // An origin that sends more than it declared never draws past the end.
    assert!(
        render(Progress {
            received: 9 * mib,
            total: 4 * mib
        })
        .starts_with("[##############################] 100.0%")
    );
    // An empty revision is complete at once, not a division by zero.
    assert!(
        render(Progress {
            received: 0,
            total: 0
        })
        .contains("100.0%")
    );
}
