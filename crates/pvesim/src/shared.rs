//! The state every connection, handler and background task holds on to.

use std::sync::Mutex;

use crate::cost::CostModel;
use crate::world::World;

/// State shared by connections and tasks.
pub struct Shared {
    pub world: Mutex<World>,
    pub token_id: String,
    pub token_secret: String,
    /// A test's kill point (`/_sim/hold`): outside the world's lock, since held requests
    /// wait on it while the world goes on.
    pub hold: crate::hold::RequestHold,
    /// The cost profile's model; `None`: requests cost nothing.
    pub cost: Option<CostModel>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("token_id", &self.token_id)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}
