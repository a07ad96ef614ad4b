/** Connectors: who carries out a Decision (PoolConnector). */
export { ConnectorError, type ConnectorErrorKind } from './errors.js';
export { KubernetesConnector, POOL_LABEL, loadKubeConfig, type KubernetesConnectorOptions } from './kubernetes.js';
export { VirtualConnector, ackKey, acksPrefix, decisionKey, decisionsPrefix, runVirtualExecutor, type VirtualAck, type VirtualConnectorOptions, type VirtualDecision } from './virtual.js';
export { LocalConnector, type LocalLauncher, type LocalWorker } from './local.js';
