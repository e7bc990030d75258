//! First-login provisioning against the users directory ([`Directory::provision`]): the seam
//! [`crate::oidc::Provision`] the OpenID Connect code calls, so that `oidc.rs` knows nothing of
//! the directory's backends.

use futures::future::BoxFuture;
use snug_identity::Claims;
use snug_users::Directory;

use crate::oidc::{Provision, ProvisionError, ProvisionedUser};

impl Provision for Directory {
    fn provision<'a>(
        &'a self,
        claims: &'a Claims,
    ) -> BoxFuture<'a, Result<Option<ProvisionedUser>, ProvisionError>> {
        Box::pin(async move {
            let user = Directory::provision(
                self,
                &claims.issuer,
                &claims.subject,
                claims.display_name.as_deref().unwrap_or(""),
            )
            .await
            .map_err(|e| match e {
                snug_users::UsersError::InvalidIdentity => ProvisionError::Unusable(e.to_string()),
                other => ProvisionError::Unavailable(other.to_string()),
            })?;
            Ok(user.map(|u| ProvisionedUser {
                id: u.id,
                name: u.name,
                quota_bytes: u.quota_bytes,
            }))
        })
    }
}

/// No directory (auth off): nobody is provisioned. Used only to check the settings.
#[derive(Debug)]
pub struct Nobody;

impl Provision for Nobody {
    fn provision<'a>(
        &'a self,
        _: &'a Claims,
    ) -> BoxFuture<'a, Result<Option<ProvisionedUser>, ProvisionError>> {
        Box::pin(async { Ok(None) })
    }
}
