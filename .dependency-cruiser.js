// The lint step's import-circle check (`pnpm lint:cycles`): no module may reach itself through its
// imports, type-only imports included. A circle means two files are one concept or a shared piece
// (a type, a constant) wants to move down into a leaf module that imports none of its users.
/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'Import circle. Move the shared types or constants down into a leaf module (types.ts, errors.ts, ' +
        'constants.ts) that imports none of the files using it, or merge the two files if they are one concept.',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    // Type-only imports (`import type`, `export type ... from`) count: they are edges of the design.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['(^|/)dist/', '(^|/)node_modules/'] },
    tsConfig: { fileName: 'tsconfig.base.json' },
    // Workspace packages resolve to their sources (the `@toolgate/source` export condition), so a
    // circle across packages is seen as well.
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['@toolgate/source', 'import', 'types', 'default'],
      extensions: ['.ts', '.tsx', '.js', '.mjs', '.cjs', '.json'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
