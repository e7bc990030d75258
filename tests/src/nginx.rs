//! nginx as the benchmarks' peer (Debian's package; `apt-get install nginx`): a child process on
//! a loopback port, serving the files it is given from a generated configuration in a directory
//! of the caller's, with DAV PUT under `/dav/`; stopped with its workers when dropped.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command},
    time::Duration,
};

/// Where `name` is installed (nginx lives in `sbin`, which a PATH may leave out).
pub fn which(name: &str) -> Option<String> {
    for dir in [
        "/usr/sbin",
        "/usr/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
        "/sbin",
    ] {
        let path = format!("{dir}/{name}");
        if Path::new(&path).exists() {
            return Some(path);
        }
    }
    None
}

/// nginx on a loopback port, serving the files it was given, with DAV PUT under `/dav/`.
#[derive(Debug)]
pub struct Nginx {
    /// Where it listens.
    pub addr: SocketAddr,
    child: Child,
    stop: Command,
}

impl Nginx {
    /// Starts `binary` serving `files` (name, bytes) from `dir`.
    pub fn start(binary: &str, dir: &Path, files: &[(&str, &[u8])]) -> Self {
        let root = dir.join("www");
        std::fs::create_dir_all(root.join("dav")).expect("www");
        // Started as root, nginx's workers run as `nobody`: they must be able to create files in
        // the DAV directory.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            for path in [dir.to_path_buf(), root.clone(), root.join("dav")] {
                let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777));
            }
        }
        for (name, bytes) in files {
            std::fs::write(root.join(name), bytes).expect("write");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("port")
            .local_addr()
            .expect("addr")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = dir.display();
        let config = format!(
            "worker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\ndaemon off;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n  keepalive_requests 1000000;\n  types {{ application/octet-stream snug; }}\n\
               server {{\n    listen {addr};\n    root {root};\n    client_max_body_size 100m;\n\
                 location /dav/ {{ dav_methods PUT; create_full_put_path on; }}\n  }}\n}}\n",
            root = root.display()
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config).expect("conf");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .spawn()
            .expect("start nginx");
        // From here `Drop` kills and reaps the child, whatever happens.
        let mut stop = Command::new(binary);
        stop.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .args(["-s", "stop"]);
        let nginx = Self { addr, child, stop };
        // Wait until it answers (bounded).
        for _ in 0..100 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return nginx;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx did not start; see {}/error.log", dir.display());
    }
}

impl Nginx {
    /// CPU time of the master and its workers.
    pub fn cpu(&self) -> Option<Duration> {
        let master = Path::new("/proc").join(self.child.id().to_string());
        let children = std::fs::read_to_string(
            master
                .join("task")
                .join(self.child.id().to_string())
                .join("children"),
        )
        .ok()?;
        let mut total = schedstat(&master)?;
        for worker in children.split_whitespace() {
            total += schedstat(&Path::new("/proc").join(worker)).unwrap_or_default();
        }
        Some(total)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // `nginx -s stop` makes the master stop its workers too; killing the master alone would
        // leave the workers running as orphans.
        let stopped = self.stop.status().is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A process's or thread's CPU time, from its `schedstat`.
pub fn schedstat(path: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(path.join("schedstat")).ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}
