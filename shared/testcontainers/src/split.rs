//! `SplitHub`: the five roles each in a container of its own, on a network of their own, with
//! the replicated store's containers when asked for.

use super::*;

/// The container, schema, materialize and sync services and the gateway, each in its own
/// container on a network of their own.
pub struct SplitHub {
    network: String,
    names: BTreeMap<Service, String>,
    // Declared before `stores`, so dropped first: the sync service goes before its store.
    containers: BTreeMap<Service, ContainerAsync<GenericImage>>,
    /// Host ports, refreshed when a service starts again (Docker picks a new one).
    ports: Mutex<BTreeMap<Service, u16>>,
    /// Empty with the embedded store.
    stores: Stores,
    startup_timeout: Duration,
    service_token: String,
}

/// The PostgreSQL and Garage containers of a [`SyncBackend::PostgresObjects`] deployment.
#[derive(Default)]
struct Stores {
    names: BTreeMap<Backing, String>,
    containers: BTreeMap<Backing, ContainerAsync<GenericImage>>,
    /// Host ports, refreshed when a store starts again.
    ports: Mutex<BTreeMap<Backing, u16>>,
    objects: Option<Objects>,
    /// What the sync container is told about them.
    sync_env: BTreeMap<String, String>,
}

impl Stores {
    /// Starts PostgreSQL and Garage on `network` (both at once) and waits until both are
    /// healthy: the sync service connects to both as it starts, and exits if it cannot.
    async fn start(id: &str, network: &str, startup_timeout: Duration) -> Result<Self, Error> {
        let (postgres_image, garage_image) = store_images().await?;
        let names: BTreeMap<Backing, String> = Backing::ALL
            .iter()
            .map(|backing| (*backing, format!("snug-hub-{id}-{}", backing.name())))
            .collect();
        let objects = Objects {
            bucket: BUCKET.to_owned(),
            prefix: OBJECTS_PREFIX.to_owned(),
            region: S3_REGION.to_owned(),
            // Garage's own formats: `GK` and 24 hex digits, 64 hex digits.
            access_key_id: format!("GK{}", random_hex(12)?),
            secret_access_key: random_hex(32)?,
        };
        let garage_env = BTreeMap::from([
            // The node's RPC is on its own loopback; the secret only has to be the same across a
            // restart of this container, which keeps its environment.
            ("GARAGE_RPC_SECRET".to_owned(), random_hex(32)?),
            (
                "GARAGE_DEFAULT_ACCESS_KEY".to_owned(),
                objects.access_key_id.clone(),
            ),
            (
                "GARAGE_DEFAULT_SECRET_KEY".to_owned(),
                objects.secret_access_key.clone(),
            ),
            ("GARAGE_DEFAULT_BUCKET".to_owned(), objects.bucket.clone()),
        ]);
        let requests = Backing::ALL.map(|backing| {
            let (image, env) = match backing {
                Backing::Postgres => (&postgres_image, BTreeMap::new()),
                Backing::Garage => (&garage_image, garage_env.clone()),
            };
            container_request(
                image,
                &names[&backing],
                Vec::new(),
                &env,
                &[backing.port()],
                startup_timeout,
                None,
            )
            .with_network(network)
        });
        let started =
            futures::future::join_all(requests.into_iter().map(|request| request.start())).await;
        let mut containers = BTreeMap::new();
        for (backing, result) in Backing::ALL.iter().zip(started) {
            // A container that did start is removed when `containers` drops.
            containers.insert(*backing, result?);
        }
        let sync_env = BTreeMap::from([
            ("SNUG_SYNC_STORE".to_owned(), "postgres".to_owned()),
            (
                "SNUG_SYNC_POSTGRES_URL".to_owned(),
                // The test server has no certificate (ssl = off), so no TLS is asked for rather
                // than `prefer`'s offer refused on every connection.
                format!(
                    "postgres://postgres@{}:{}/postgres?sslmode=disable",
                    names[&Backing::Postgres],
                    Backing::Postgres.port()
                ),
            ),
            (
                "SNUG_SYNC_OBJECTS".to_owned(),
                format!("s3://{}/{}", objects.bucket, objects.prefix),
            ),
            (
                "AWS_ENDPOINT_URL".to_owned(),
                format!(
                    "http://{}:{}",
                    names[&Backing::Garage],
                    Backing::Garage.port()
                ),
            ),
            ("AWS_REGION".to_owned(), objects.region.clone()),
            (
                "AWS_ACCESS_KEY_ID".to_owned(),
                objects.access_key_id.clone(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY".to_owned(),
                objects.secret_access_key.clone(),
            ),
            // Plain http to a name on the deployment's private network: the S3 client allows
            // it only to loopback unless told.
            ("AWS_ALLOW_HTTP".to_owned(), "true".to_owned()),
        ]);
        let stores = Self {
            names,
            containers,
            ports: Mutex::new(BTreeMap::new()),
            objects: Some(objects),
            sync_env,
        };
        for backing in Backing::ALL {
            stores.refresh_port(backing).await?;
        }
        Ok(stores)
    }

    /// The container of `backing`, or the error saying the deployment has none.
    fn container(&self, backing: Backing) -> Result<&ContainerAsync<GenericImage>, Error> {
        self.containers
            .get(&backing)
            .ok_or(Error::NoStoreContainer(backing))
    }

    async fn refresh_port(&self, backing: Backing) -> Result<u16, Error> {
        let port = host_port(
            self.container(backing)?,
            &self.names[&backing],
            backing.port(),
        )
        .await?;
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(backing, port);
        Ok(port)
    }

    fn port(&self, backing: Backing) -> Option<u16> {
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&backing)
            .copied()
    }
}

impl SplitHub {
    /// Starts the five containers (all at once) and waits until each one's health check passes;
    /// with [`SyncBackend::PostgresObjects`], starts the PostgreSQL and Garage containers first
    /// (building their images from this checkout unless they exist, once per process) and waits
    /// for them too.
    pub async fn start(image: &HubImage, options: HubOptions) -> Result<Self, Error> {
        let id = deployment_id();
        let network = format!("snug-hub-{id}");
        let stores = match options.sync_backend {
            SyncBackend::Embedded => Stores::default(),
            SyncBackend::PostgresObjects => {
                Stores::start(&id, &network, options.startup_timeout).await?
            }
        };
        let service_token = random_hex(32)?;
        let names: BTreeMap<Service, String> = Service::ALL
            .iter()
            .map(|service| (*service, format!("snug-hub-{id}-{}", service.name())))
            .collect();
        let requests = Service::ALL.map(|service| {
            let mut env = options.hub_env(&service_token);
            if service == Service::Gateway {
                for (variable, target) in [
                    ("SNUG_SYNC_ADDR", Service::Sync),
                    ("SNUG_MATERIALIZE_ADDR", Service::Materialize),
                ] {
                    env.insert(
                        variable.to_owned(),
                        format!("http://{}:{GRPC_PORT}", names[&target]),
                    );
                }
                env.insert(
                    "SNUG_CORS_ORIGINS".to_owned(),
                    options.cors_origins.join(","),
                );
            }
            if service == Service::Sync {
                env.extend(stores.sync_env.clone());
            }
            env.extend(
                options
                    .service_env
                    .get(&service)
                    .cloned()
                    .unwrap_or_default(),
            );
            let cmd = vec!["serve".to_owned(), service.name().to_owned()];
            container_request(
                image,
                &names[&service],
                cmd,
                &env,
                &[service.port()],
                options.startup_timeout,
                None,
            )
            .with_network(network.as_str())
        });
        // All at once: five sequential starts would each wait for the previous health check.
        let started =
            futures::future::join_all(requests.into_iter().map(|request| request.start())).await;
        let mut containers = BTreeMap::new();
        let mut first_error = None;
        for (service, result) in Service::ALL.iter().zip(started) {
            match result {
                Ok(container) => {
                    containers.insert(*service, container);
                }
                Err(err) => {
                    first_error.get_or_insert(Error::Docker(err));
                }
            }
        }
        // The containers that did start are removed when `containers` drops.
        if let Some(err) = first_error {
            return Err(err);
        }
        let hub = Self {
            network,
            names,
            containers,
            ports: Mutex::new(BTreeMap::new()),
            stores,
            startup_timeout: options.startup_timeout,
            service_token,
        };
        for service in Service::ALL {
            hub.refresh_port(service).await?;
        }
        Ok(hub)
    }

    async fn refresh_port(&self, service: Service) -> Result<u16, Error> {
        let port = host_port(
            &self.containers[&service],
            &self.names[&service],
            service.port(),
        )
        .await?;
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(service, port);
        Ok(port)
    }

    fn port(&self, service: Service) -> u16 {
        // Every service's port is recorded before `start` returns.
        self.ports
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&service)
            .copied()
            .unwrap_or(0)
    }

    /// The gateway's base URL, e.g. `http://127.0.0.1:49160`.
    pub fn gateway_url(&self) -> String {
        format!("http://{}", self.gateway_addr())
    }

    /// The gateway's address on the host.
    pub fn gateway_addr(&self) -> SocketAddr {
        loopback(self.port(Service::Gateway))
    }

    /// A service's gRPC endpoint on the host, e.g. `http://127.0.0.1:49153`; `None` for the
    /// gateway. It changes when the service is started again.
    pub fn grpc_endpoint(&self, service: Service) -> Option<String> {
        self.grpc_addr(service).map(|addr| format!("http://{addr}"))
    }

    /// A service's gRPC address on the host; `None` for the gateway.
    pub fn grpc_addr(&self, service: Service) -> Option<SocketAddr> {
        (service != Service::Gateway).then(|| loopback(self.port(service)))
    }

    /// The service token every gRPC call to a service must present (`authorization: Bearer
    /// <token>`), but health checks.
    pub fn service_token(&self) -> &str {
        &self.service_token
    }

    /// The deployment's Docker network.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// A service's container name, which is also its host name on the network.
    pub fn container_name(&self, service: Service) -> &str {
        &self.names[&service]
    }

    /// A service's container id.
    pub fn container_id(&self, service: Service) -> &str {
        self.containers[&service].id()
    }

    /// Adds a user to the gateway with `snug-hub users add` and returns their bearer token.
    pub async fn add_user(&self, user: &str) -> Result<String, Error> {
        add_user(
            &self.containers[&Service::Gateway],
            &self.names[&Service::Gateway],
            user,
        )
        .await
    }

    /// Runs a command inside a service's container (`argv[0]` is a path, such as `/snug-hub`).
    pub async fn exec(&self, service: Service, argv: &[&str]) -> Result<ExecOutput, Error> {
        exec(&self.containers[&service], &self.names[&service], argv).await
    }

    /// Stops one service's container (SIGTERM, a graceful drain, SIGKILL after 10 s). Its
    /// volume stays; the others keep running.
    pub async fn stop_service(&self, service: Service) -> Result<(), Error> {
        self.containers[&service]
            .stop_with_timeout(Some(10))
            .await?;
        Ok(())
    }

    /// Starts a stopped service's container again and waits until its health check passes;
    /// its host port is read anew.
    pub async fn start_service(&self, service: Service) -> Result<(), Error> {
        let container = &self.containers[&service];
        container.start().await?;
        wait_healthy(
            container,
            &self.names[&service],
            &["/snug-hub", "healthcheck"],
            self.startup_timeout,
        )
        .await?;
        self.refresh_port(service).await?;
        Ok(())
    }

    /// Stops and starts one service.
    pub async fn restart_service(&self, service: Service) -> Result<(), Error> {
        self.stop_service(service).await?;
        self.start_service(service).await
    }

    /// What a service's container printed so far.
    pub async fn logs(&self, service: Service) -> String {
        logs(&self.containers[&service]).await
    }

    /// The sync service's store, [`SyncBackend::Embedded`] unless it runs on its own containers.
    pub fn sync_backend(&self) -> SyncBackend {
        if self.stores.containers.is_empty() {
            SyncBackend::Embedded
        } else {
            SyncBackend::PostgresObjects
        }
    }

    /// A store container's name, which is also its host name on the network; `None` with the
    /// embedded store.
    pub fn store_container_name(&self, backing: Backing) -> Option<&str> {
        self.stores.names.get(&backing).map(String::as_str)
    }

    /// The host address a store container's port is published on (127.0.0.1); `None` with the
    /// embedded store. It changes when the store is started again.
    pub fn store_addr(&self, backing: Backing) -> Option<SocketAddr> {
        self.stores.port(backing).map(loopback)
    }

    /// The PostgreSQL server's URL on the host, e.g.
    /// `postgres://postgres@127.0.0.1:49170/postgres?sslmode=disable` (no password: the test
    /// image trusts every connection).
    pub fn postgres_url(&self) -> Option<String> {
        self.store_addr(Backing::Postgres)
            .map(|addr| format!("postgres://postgres@{addr}/postgres?sslmode=disable"))
    }

    /// Garage's S3 endpoint on the host, e.g. `http://127.0.0.1:49171` (path-style requests).
    pub fn s3_endpoint(&self) -> Option<String> {
        self.store_addr(Backing::Garage)
            .map(|addr| format!("http://{addr}"))
    }

    /// The bucket and its key; `None` with the embedded store.
    pub fn objects(&self) -> Option<&Objects> {
        self.stores.objects.as_ref()
    }

    /// Runs a command inside a store container (no shell: `argv[0]` is a path, such as
    /// `/garage`, whose CLI reaches the node over the container's loopback).
    pub async fn exec_store(&self, backing: Backing, argv: &[&str]) -> Result<ExecOutput, Error> {
        exec(
            self.stores.container(backing)?,
            &self.stores.names[&backing],
            argv,
        )
        .await
    }

    /// Stops a store container (PostgreSQL's fast shutdown, Garage's SIGTERM; SIGKILL after
    /// 10 s). Its volume stays; the hub keeps running and answers `STORAGE_UNAVAILABLE` for
    /// what needs the store.
    pub async fn stop_store(&self, backing: Backing) -> Result<(), Error> {
        self.stores
            .container(backing)?
            .stop_with_timeout(Some(10))
            .await?;
        Ok(())
    }

    /// Starts a stopped store container again, over the same volume, and waits until its
    /// health check passes; its host port is read anew.
    pub async fn start_store(&self, backing: Backing) -> Result<(), Error> {
        let container = self.stores.container(backing)?;
        container.start().await?;
        wait_healthy(
            container,
            &self.stores.names[&backing],
            backing.probe(),
            self.startup_timeout,
        )
        .await?;
        self.stores.refresh_port(backing).await?;
        Ok(())
    }

    /// What a store container printed so far; empty with the embedded store.
    pub async fn store_logs(&self, backing: Backing) -> String {
        match self.stores.container(backing) {
            Ok(container) => logs(container).await,
            Err(_) => String::new(),
        }
    }
}
