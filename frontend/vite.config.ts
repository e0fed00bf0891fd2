/// <reference types="vitest/config" />
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

import react from "@vitejs/plugin-react";
import { defineConfig, type Plugin } from "vite";

/**
 * Writes a .gz and a .br beside every text asset of the build. WhiteNoise serves them to browsers
 * that accept the encoding (it never compresses on the fly), and the hashed names under /assets/
 * get far-future caching (phantomhub/settings.py).
 */
function precompress(dir: string): Plugin {
  const TEXT = /\.(js|mjs|css|svg|json|map|txt|html)$/;
  return {
    name: "phantomhub-precompress",
    apply: "build",
    closeBundle() {
      const walk = (d: string): string[] => readdirSync(d).flatMap((f) => (statSync(join(d, f)).isDirectory() ? walk(join(d, f)) : [join(d, f)]));
      for (const file of walk(dir)) {
        if (!TEXT.test(file)) continue;
        const body = readFileSync(file);
        if (body.length < 1024) continue;
        writeFileSync(`${file}.gz`, gzipSync(body, { level: 9 }));
        writeFileSync(`${file}.br`, brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: body.length } }));
      }
    },
  };
}

// Django serves dist/index.html for every client-side route and the hashed files under /assets/
// (WhiteNoise with WHITENOISE_ROOT = frontend/dist), so the app lives at the site root.
const backend = process.env.PHANTOMHUB_URL ?? "http://127.0.0.1:8000";

export default defineConfig({
  base: "/",
  plugins: [react(), precompress("dist/assets")],
  build: {
    outDir: "dist",
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 1200,
    rolldownOptions: {
      output: {
        codeSplitting: {
          groups: [{ name: "echarts", test: /node_modules[\\/](echarts|zrender)/ }],
        },
      },
    },
  },
  server: {
    port: 5173,
    proxy: {
      "/api": { target: backend, changeOrigin: false },
      "/admin": { target: backend, changeOrigin: false },
    },
  },
  test: {
    environment: "jsdom",
    globals: true,
    setupFiles: ["./src/test/setup.ts"],
    css: false,
    include: ["src/**/*.test.{ts,tsx}"],
  },
});
