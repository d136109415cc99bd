// The layers of lib/, bottom up: each may import only the ones before it (type imports too).
const LAYERS = [
  'types',
  'messages',
  'errors',
  'telemetry',
  'serialization',
  'redis',
  'memory',
  'options',
  'lock',
  'single-flight',
  'cache',
  'decorators',
  '[^/]+[.]ts$', // the Nest module and the entry point
  '(terminus|opentelemetry)',
];

const above = (index) => `^lib/(${LAYERS.slice(index + 1).join('|')})`;

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import cycle in lib/, type-only imports included.',
      from: { path: '^lib/' },
      to: { circular: true },
    },
    {
      name: 'lib-imports-no-tests',
      severity: 'error',
      from: { path: '^lib/' },
      to: { path: '^(test|sample)/' },
    },
    ...LAYERS.slice(0, -1).map((layer, index) => ({
      name: `layer-${index}-imports-downward`,
      severity: 'error',
      comment: `lib/${layer} imports only the layers below it.`,
      from: { path: `^lib/${layer}` },
      to: { path: above(index) },
    })),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
