//! What a start set running, so that a stop, or a start that fails halfway, stops exactly that.

/// The tasks a start spawned, which a stop waits for.
#[derive(Default)]
pub(crate) struct Running {
    /// The AMQP accept loops: each says whether its connections closed in time.
    listeners: Vec<tokio::task::JoinHandle<bool>>,
    /// The HTTP servers (management API and UI, HTTPS, Prometheus, Zaqar).
    servers: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Spawns an AMQP accept loop.
    pub(crate) fn listen(&mut self, accept_loop: impl Future<Output = bool> + Send + 'static) {
        self.listeners.push(tokio::spawn(accept_loop));
    }

    /// Spawns an HTTP server; what it returns is not looked at.
    pub(crate) fn serve<T: Send + 'static>(&mut self, server: impl Future<Output = T> + Send + 'static) {
        self.servers.push(tokio::spawn(async move {
            let _ = server.await;
        }));
    }

    /// Waits for every task (the shutdown signal was sent); whether every connection closed.
    pub(crate) async fn stop(self) -> bool {
        let mut drained = true;
        for handle in self.listeners {
            drained &= handle.await.unwrap_or(false);
        }
        for handle in self.servers {
            let _ = handle.await;
        }
        drained
    }
}
