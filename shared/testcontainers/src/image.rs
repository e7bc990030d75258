//! The hub's image: named by `SNUG_HUB_IMAGE`, or built from this checkout and tagged by the
//! digest of its build context.

use super::*;

/// A Snug Hub image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubImage {
    name: String,
    tag: String,
}

impl HubImage {
    /// An image that exists locally (nothing is ever pulled).
    pub fn new(name: impl Into<String>, tag: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            tag: tag.into(),
        }
    }

    /// Parses `name:tag` (a registry host with a port is fine: the tag is after the last `:`
    /// that follows the last `/`).
    pub fn parse(reference: &str) -> Result<Self, Error> {
        let bad = || Error::BadImageReference(reference.to_owned());
        let slash = reference.rfind('/').map_or(0, |i| i + 1);
        let colon = reference[slash..]
            .rfind(':')
            .map(|i| slash + i)
            .ok_or_else(bad)?;
        let (name, tag) = (&reference[..colon], &reference[colon + 1..]);
        if name.is_empty() || tag.is_empty() || reference.chars().any(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Self::new(name, tag))
    }

    /// The image `SNUG_HUB_IMAGE` names when it is set, otherwise the image of this checkout
    /// ([`HubImage::build_from_checkout`] on the workspace this crate was built from).
    pub async fn resolve() -> Result<Self, Error> {
        match std::env::var(IMAGE_ENV) {
            Ok(reference) if !reference.trim().is_empty() => Self::parse(reference.trim()),
            _ => Self::build_from_checkout(&workspace_root()).await,
        }
    }

    /// Builds the image of the checkout at `root` unless an identical one exists.
    ///
    /// `deploy/build-image.sh --context` builds the static binary (incrementally, in its own
    /// target directory) and writes the build context, printing a digest of it; the image is
    /// tagged with that digest, so an existing image with the tag is exactly this source and is
    /// reused, and any change to the binary, the Dockerfile or the context makes a new one.
    /// The build itself is testcontainers' (BuildKit through the Engine API), and pulls nothing.
    pub async fn build_from_checkout(root: &Path) -> Result<Self, Error> {
        build_from_context_script(root, "deploy/build-image.sh", IMAGE_NAME).await
    }

    /// Builds the test PostgreSQL image of the checkout at `root` ([`POSTGRES_IMAGE_NAME`],
    /// `deploy/build-postgres-image.sh --context`: Debian's PostgreSQL 15 installed on this
    /// machine, FROM scratch, with a cluster that trusts every connection) unless an identical one
    /// exists, as [`HubImage::build_from_checkout`] does.
    pub async fn postgres_from_checkout(root: &Path) -> Result<Self, Error> {
        build_from_context_script(root, "deploy/build-postgres-image.sh", POSTGRES_IMAGE_NAME).await
    }

    /// Builds the Garage image of the checkout at `root` ([`GARAGE_IMAGE_NAME`],
    /// `deploy/build-garage-image.sh --context`, around the `garage` binary at
    /// `$SNUG_TEST_GARAGE`, else the one `.ci/run` installs) unless an identical one exists, as
    /// [`HubImage::build_from_checkout`] does.
    pub async fn garage_from_checkout(root: &Path) -> Result<Self, Error> {
        build_from_context_script(root, "deploy/build-garage-image.sh", GARAGE_IMAGE_NAME).await
    }

    /// The repository name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// `name:tag`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }
}

/// Runs `script --context DIR` in the checkout at `root`, which writes an image's build context
/// and prints its content tag, and builds `name:<tag>` from that context unless it exists.
async fn build_from_context_script(
    root: &Path,
    script: &str,
    name: &str,
) -> Result<HubImage, Error> {
    let context = tempfile::Builder::new()
        .prefix(&format!("{name}-image-"))
        .tempdir()?;
    let path = root.join(script);
    let dir = context.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(&path)
            .arg("--context")
            .arg(&dir)
            // cargo's progress goes straight to the test's stderr: a first build takes minutes.
            .stderr(std::process::Stdio::inherit())
            .output()
    })
    .await
    .map_err(|err| Error::Build(format!("the build task failed: {err}")))??;
    if !output.status.success() {
        return Err(Error::Build(format!(
            "{script} --context exited with {}",
            output.status
        )));
    }
    let tag = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let well_formed = tag.len() == 20
        && tag.starts_with("ctx-")
        && tag[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !well_formed {
        return Err(Error::Build(format!(
            "{script} printed {tag:?}, not a content tag"
        )));
    }
    let mut buildable = GenericBuildableImage::new(name, tag.as_str());
    for entry in std::fs::read_dir(context.path())? {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        buildable = if file == "Dockerfile" {
            buildable.with_dockerfile(entry.path())
        } else {
            buildable.with_file(entry.path(), format!("./{file}"))
        };
    }
    let built = buildable
        .build_image_with(BuildImageOptions::new().with_skip_if_exists(true))
        .await?;
    Ok(HubImage::new(built.name(), built.tag()))
}

/// The workspace this crate belongs to (two levels above `shared/testcontainers`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
